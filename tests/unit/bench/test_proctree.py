"""The benchmark's process-tree memory: a forked child is counted, the same address space once."""

from __future__ import annotations

import os
import signal

from bench.proctree import _shares_parent_memory, tree_memory
from harness.proctree import _tree


def test_a_forked_child_is_its_own_memory_and_counted() -> None:
    alone, _ = tree_memory(os.getpid(), with_pss=False)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only waits to be killed
        signal.pause()
        os._exit(0)
    try:
        assert (child, os.getpid()) in _tree(os.getpid())
        assert not _shares_parent_memory(child, os.getpid())
        both, _ = tree_memory(os.getpid(), with_pss=False)
        assert both > alone
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_one_address_space_is_recognised() -> None:
    assert _shares_parent_memory(os.getpid(), os.getpid())
    assert not _shares_parent_memory(os.getpid(), 0)
