"""Spark's Python daemon as the session starts it: pyspark's, with a reused worker's imports
frozen after its first task."""

from __future__ import annotations

import gc
import socket
import subprocess
import sys
import weakref
from collections.abc import Iterator

import pytest
from pyspark import daemon as pyspark_daemon

from replicator.spark import daemon
from replicator.spark.session import DEFAULT_CONF


@pytest.fixture
def tasks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """pyspark's worker replaced by one that records its tasks; the freeze undone after."""
    ran: list[int] = []
    monkeypatch.setattr(daemon, "_pyspark_worker", lambda sock, authenticated: ran.append(1) or 0)
    monkeypatch.setattr(daemon, "_frozen", False)
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")  # as Spark sets it with worker reuse on
    yield ran
    gc.unfreeze()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only a collection frees it


def test_the_session_starts_this_daemon_and_its_fork_loop_calls_this_worker() -> None:
    assert DEFAULT_CONF["spark.python.daemon.module"] == "replicator.spark.daemon"
    assert pyspark_daemon.worker is daemon.worker


def test_its_workers_run_the_sampled_rules_on_arrow(tasks: list[int]) -> None:
    import pyspark.worker

    # The rules' Arrow form (replicator.spark.stateful_arrow), set in each forked worker.
    a, b = socket.socketpair()
    with a, b:
        assert daemon.worker(a, True) == 0
    assert getattr(pyspark.worker.read_udfs, "arrow_stateful", False)


def test_the_fork_loop_starts_no_pyarrow_threads() -> None:
    # pyarrow and numpy start threads on import; a fork beside them can deadlock a worker.
    code = "import sys, replicator.spark.daemon; print('pyarrow' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_after_the_first_task_what_the_worker_holds_is_frozen_and_later_garbage_still_freed(
    tasks: list[int],
) -> None:
    a, b = socket.socketpair()
    with a, b:
        assert daemon.worker(a, True) == 0
        frozen = gc.get_freeze_count()
        assert frozen > 0  # the worker's imports and caches
        leftover = _Node()
        gone = weakref.ref(leftover)
        del leftover
        assert daemon.worker(a, True) == 0
        # Frozen once, not after every task: a second freeze would add what is alive now. The
        # count may drop (a frozen object freed meanwhile: CI saw 5 fewer), never grow.
        assert gc.get_freeze_count() <= frozen
        gc.collect()  # what pyspark's daemon runs after each task
        assert gone() is None  # a later task's cyclic garbage is freed
    assert tasks == [1, 1]


def test_a_worker_that_ends_after_its_task_is_not_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemon, "_frozen", False)
    monkeypatch.setattr(daemon, "_pyspark_worker", lambda sock, authenticated: 1)  # a failed task
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    before = gc.get_freeze_count()
    a, b = socket.socketpair()
    with a, b:
        assert daemon.worker(a, True) == 1
        monkeypatch.setattr(daemon, "_pyspark_worker", lambda sock, authenticated: 0)
        monkeypatch.delenv("SPARK_REUSE_WORKER")  # no reuse: each worker runs one task
        assert daemon.worker(a, True) == 0
    assert gc.get_freeze_count() == before and not daemon._frozen


def test_pysparks_padding_of_a_stateful_pandas_output_warns_nothing_in_its_workers() -> None:
    """pyspark concatenates a pandas function's output with all-NA padding rows (worker.py,
    construct_record_batch): pandas 2's FutureWarning about it is not the user's to act on."""
    code = """
import warnings
import pandas as pd
import replicator.spark.daemon
out = pd.DataFrame({"a": [1.5], "t": [pd.Timestamp("2026-01-01")]})
padding = pd.DataFrame(dict.fromkeys(["a", "t"]), index=[0, 1])
with warnings.catch_warnings(record=True) as seen:
    pd.concat([out, padding], ignore_index=True)
    warnings.warn("another FutureWarning", FutureWarning)
print([str(w.message) for w in seen])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['another FutureWarning']", out
