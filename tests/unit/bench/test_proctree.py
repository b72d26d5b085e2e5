"""The benchmark's process trees: a forked child's memory is counted, the same address space once;
each group's CPU is its trees'."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from bench.proctree import GroupCpu, _shares_parent_memory, _tree, tree_memory


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


def test_each_groups_cpu_is_its_trees_and_the_rest_is_the_machines(tmp_path: Path) -> None:
    """A child that burns 0.3 s of CPU, then waits: its group has that much, a group with
    no process none, and the machine's other work is "rest of the machine"."""
    burn = "import time\nwhile time.process_time() < 0.3: pass\nprint('done', flush=True)\ntime.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    cpu = GroupCpu(lambda: {"burner": [child.pid], "nobody": []}, split=frozenset({"burner"}), interval=0.1)
    try:
        cpu.start()
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        seconds = cpu.stop()
    finally:
        child.kill()
        child.wait()
    burner = sum(v for k, v in seconds.items() if k.startswith("burner: "))
    assert 0.2 <= burner <= 1.0, seconds  # what it burnt after start(), in whole ticks
    assert "nobody" not in seconds and "rest of the machine" in seconds
    assert set(cpu.shares()) == set(seconds)
