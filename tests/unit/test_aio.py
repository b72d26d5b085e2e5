"""The loop thread that synchronous code drives nats-py connections through."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import socket
import time

import pytest

from replicator.aio import LoopStopped, LoopThread, unless_stopped
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


def test_a_connection_attempt_cancelled_at_any_moment_ends() -> None:
    """Python 3.11's asyncio.wait_for, around each of nats-py's connection attempts, drops a
    cancel that lands as the attempt ends (python/cpython#86296): the client then went on
    trying for ever, and a stop while the servers did not answer waited for the stop deadline.
    Cancelled at 40 moments of rapid refused attempts, each attempt ends (63 of 200 did not
    before)."""
    logging.disable(logging.WARNING)  # each refusal logged

    async def cancelled_at(delay: float) -> bool:
        attempt = asyncio.ensure_future(
            open_connection("nats://127.0.0.1:1", name="cancelled", reconnect_time_wait=0.001)
        )
        await asyncio.sleep(delay)
        attempt.cancel()
        done, _ = await asyncio.wait({attempt}, timeout=5)  # a bound for a hang, not a timing
        return bool(done)

    async def all_end() -> list[float]:
        rnd = random.Random(1)
        delays = [rnd.uniform(0, 0.02) for _ in range(40)]
        return [d for d in delays if not await cancelled_at(d)]

    try:
        assert asyncio.run(all_end()) == []
    finally:
        logging.disable(logging.NOTSET)


def test_a_connection_attempt_cancelled_twice_still_ends() -> None:
    """A second cancel (a stop while an attempt was being abandoned) interrupted the abandoning,
    and an attempt whose first cancel had been dropped went on trying for ever (found by a
    review). Here each attempt is cancelled twice, 1 ms apart, at 40 moments: no task is left."""
    logging.disable(logging.WARNING)

    async def tasks_left_after(delay: float) -> int:
        attempt = asyncio.ensure_future(
            open_connection("nats://127.0.0.1:1", name="cancelled-twice", reconnect_time_wait=0.001)
        )
        await asyncio.sleep(delay)
        attempt.cancel()
        await asyncio.sleep(0.001)
        attempt.cancel()
        await asyncio.wait({attempt}, timeout=5)
        deadline = asyncio.get_running_loop().time() + 5  # a bound for a hang, not a timing
        while (
            left := asyncio.all_tasks() - {asyncio.current_task()}
        ) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        return len(left)

    async def leftovers() -> list[int]:
        rnd = random.Random(2)
        return [await tasks_left_after(rnd.uniform(0, 0.02)) for _ in range(40)]

    try:
        assert set(asyncio.run(leftovers())) == {0}
    finally:
        logging.disable(logging.NOTSET)


def test_unless_stopped_gives_the_result_or_none_once_stopped_and_passes_a_cancel_on() -> None:
    async def scenario() -> None:
        async def answer() -> int:
            await asyncio.sleep(0.01)
            return 42

        assert await unless_stopped(answer(), lambda: False, poll_s=0.001) == 42

        cleaned_up = asyncio.Event()

        async def endless() -> None:  # a wait with no end of its own, slow to clean up
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await asyncio.sleep(0.05)
                cleaned_up.set()
                raise

        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        assert await unless_stopped(endless(), stop.is_set, poll_s=0.001) is None
        assert cleaned_up.is_set()  # waited for, not left running

        async def answers_as_it_is_cancelled() -> int:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return 7  # a connection made just as the stop came: kept, not dropped
            return 0

        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, stop.set)
        assert await unless_stopped(answers_as_it_is_cancelled(), stop.is_set, poll_s=0.001) == 7

        inner = asyncio.get_running_loop().create_future()
        outer = asyncio.ensure_future(unless_stopped(inner, lambda: False, poll_s=0.001))
        await asyncio.sleep(0.01)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert inner.cancelled()

        inner = asyncio.get_running_loop().create_future()  # cancelled by another, not a stop
        asyncio.get_running_loop().call_later(0.01, inner.cancel)
        with pytest.raises(asyncio.CancelledError):
            await unless_stopped(inner, lambda: False, poll_s=0.001)

    asyncio.run(scenario())
