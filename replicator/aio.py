"""A private asyncio loop on a daemon thread, so synchronous code (Spark callbacks) can drive
nats-py connections that stay alive (answering server pings) between calls."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopStopped(RuntimeError):
    pass


# How often a wait that a stop can end looks at the stop (a stop's whole bound is 45 s).
STOP_POLL_S = 0.25


async def unless_stopped(aw: Awaitable[T], stop: Callable[[], bool], poll_s: float = STOP_POLL_S) -> T | None:
    """`aw`'s result, or None once `stop()` is true first: `aw` is then cancelled and waited
    for (a connection attempt abandoned, not left to connect later). For waits with no end
    of their own, such as a connection to servers that do not answer. A result that came
    as it was cancelled is kept; a cancel of the caller, or of `aw` by anything else, is
    raised (`asyncio.wait`, not an await of the task, keeps the two apart)."""
    task = asyncio.ensure_future(aw)
    stopped = False
    try:
        while not task.done():
            if stop():
                stopped = True
                task.cancel()
                await asyncio.wait({task})
                break
            await asyncio.wait({task}, timeout=poll_s)
    finally:
        if not task.done():  # the caller was cancelled, or stop() raised
            task.cancel()
    if task.cancelled() and stopped:
        return None
    return task.result()  # raises CancelledError if it was cancelled by another


class LoopThread:
    def __init__(self, name: str = "nats-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._stopped = False
        self._stopping = threading.Lock()  # a submit is refused, or scheduled before the stop
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result; past `timeout` it is cancelled (not
        left running: a connection attempt would otherwise connect later, an orphan)."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the loop; its future completes when it does. Refused once the loop
        is stopped: its future would never complete (a waiter would wait for ever, and a
        batch handed over would look published to Spark)."""
        with self._stopping:
            if self._stopped:
                coro.close()
                raise LoopStopped("the NATS connection loop has stopped: the replicator is stopping")
            return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        """Refuse new work, cancel what still runs (its waiters get CancelledError instead of
        waiting for ever), then stop the loop."""
        with self._stopping:
            first, self._stopped = not self._stopped, True
        if first and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._cancel_all_and_stop(), self.loop)
        self._thread.join(timeout=5)

    async def _cancel_all_and_stop(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        self.loop.stop()
