"""Restart backoff: doubling to a limit, and reset once a stream makes progress again."""

from __future__ import annotations

from replicator.backoff import Backoff


def test_waits_double_up_to_the_limit() -> None:
    b = Backoff(first=1, limit=30)
    assert [b.next_wait() for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]


def test_progress_resets_it_so_a_later_failure_is_retried_soon() -> None:
    b = Backoff(first=1, limit=30)
    for _ in range(6):
        b.next_wait()
    b.reset()
    assert b.next_wait() == 1
