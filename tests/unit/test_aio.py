"""The loop thread that synchronous code drives nats-py connections through."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import time

import pytest

from replicator.aio import LoopStopped, LoopThread
from replicator.nats.connect import open_connection


def test_a_call_that_times_out_is_cancelled_and_leaves_no_connection_behind() -> None:
    """A connection attempt given up by its caller must not connect later, an orphan client
    nobody closes (issue 28, hole 9). The peer accepts TCP and never answers, as a server
    behind a half-open link does."""
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    loop = LoopThread("test-aio")
    try:
        with pytest.raises(concurrent.futures.TimeoutError):
            loop.run(open_connection(f"nats://127.0.0.1:{port}", name="given-up"), 0.5)
        deadline = time.monotonic() + 10

        async def tasks_left() -> int:
            return len(asyncio.all_tasks()) - 1  # this one

        while (left := loop.run(tasks_left(), 5)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == 0, "the connection attempt is still running after its caller gave up"
    finally:
        loop.stop()
        silent.close()


def test_work_handed_to_a_stopped_loop_is_refused_not_left_waiting() -> None:
    """A batch handed over after the loop stopped would never be published, and its waiter
    would wait for ever: it is refused at once, and the coroutine is closed, not leaked."""
    loop = LoopThread("test-aio-stopped")

    async def answer() -> int:
        return 42

    assert loop.run(answer(), 5) == 42
    loop.stop()
    coro = answer()
    with pytest.raises(LoopStopped, match="has stopped"):
        loop.submit(coro)
    assert coro.cr_frame is None  # closed: no "never awaited" warning, nothing left to run
    with pytest.raises(LoopStopped):
        loop.run(answer(), 5)


def test_work_still_running_when_the_loop_stops_ends_its_waiters_wait() -> None:
    """A publish still awaiting its acks when the loop stops: its waiter gets CancelledError
    (the batch's in-flight record stays) instead of waiting for ever."""
    loop = LoopThread("test-aio-running")
    started = concurrent.futures.Future[None]()

    async def never_acked() -> None:
        started.set_result(None)
        await asyncio.Event().wait()

    pending = loop.submit(never_acked())
    started.result(5)
    loop.stop()
    with pytest.raises(concurrent.futures.CancelledError):
        pending.result(5)
    loop.stop()  # again: nothing more to do
