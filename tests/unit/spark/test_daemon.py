"""Spark's Python daemon as the session starts it: pyspark's, with a reused worker's imports
frozen after its first task."""

from __future__ import annotations

import gc
import socket
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
        assert gc.get_freeze_count() == frozen  # frozen once, not after every task
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
