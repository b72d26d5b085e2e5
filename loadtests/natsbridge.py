"""nats-py (asyncio) inside locust (gevent): one native thread runs the asyncio loop.

Mixing them naively fails: a loop per user inside its greenlet refuses to run
("Cannot run the event loop while another loop is running"), and starting the loop thread
from `on_start` races. What works: one real OS thread (gevent's original `start_new_thread`)
running asyncio on the original, unpatched selector, started once; greenlets hand coroutines
over with `call_soon_threadsafe` (no lock shared with the loop thread) and sleep on a gevent
event that the loop thread sets through the hub's thread-safe callback, so waiting never blocks
other users. Host names are looked up with the original, blocking `getaddrinfo` on the loop
thread: asyncio's default executor would run it on a patched thread, a greenlet of a hub the
loop thread never runs, and every connect to a name would time out.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

import gevent
import gevent.event
import gevent.monkey

T = TypeVar("T")


class _Outcome:
    """A request's result, written once by the loop thread before it signals the greenlet."""

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.value: Any = None
        self.error: Exception | None = None


class _NativeLookupLoop(asyncio.SelectorEventLoop):
    """A loop whose name lookups block its own (native) thread instead of using an executor."""

    async def getaddrinfo(  # type: ignore[override]
        self, host: Any, port: Any, *, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> Any:
        lookup = gevent.monkey.get_original("socket", "getaddrinfo")
        return lookup(host, port, family, type, proto, flags)


class AsyncioBridge:
    def __init__(self) -> None:
        selector_cls = gevent.monkey.get_original("selectors", "DefaultSelector")
        self.loop = _NativeLookupLoop(selector_cls())
        started = threading.Event()
        start_thread = gevent.monkey.get_original("_thread", "start_new_thread")

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(started.set)
            self.loop.run_forever()

        start_thread(run, ())
        # A native wait: this runs once at import, before any greenlet needs the bridge.
        if not started.wait(10):
            raise RuntimeError("asyncio loop thread did not start")

    def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run `coro` on the loop; the calling greenlet yields until it is done.

        No lock is shared with the loop thread: under gevent a lock (a concurrent future's
        condition, say) is a gevent lock, and a greenlet taking one the loop thread holds can
        hang until it is killed, its request stored and never counted (2 of 30 runs hung so
        on a busy machine). The loop thread writes the outcome, then wakes the greenlet through
        the hub's thread-safe callback; handing the coroutine over is a lock-free
        `call_soon_threadsafe`.

        If the greenlet is killed meanwhile (locust stopping a user), the request has been
        handed over and may be stored: wait for its outcome, so the caller can still account for it,
        and raise `Interrupted` carrying it."""
        outcome = _Outcome()
        done = gevent.event.Event()
        hub = gevent.get_hub()

        def finish(task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                outcome.error = TimeoutError("cancelled")
            else:
                error = task.exception()
                if error is None:
                    outcome.value = task.result()
                else:
                    outcome.error = error if isinstance(error, Exception) else RuntimeError(repr(error))
            hub.loop.run_callback_threadsafe(done.set)

        def start() -> None:
            outcome.task = self.loop.create_task(coro)
            outcome.task.add_done_callback(finish)

        self.loop.call_soon_threadsafe(start)
        try:
            finished = done.wait(timeout)
        except gevent.GreenletExit as stop:
            raise Interrupted(self._outcome(outcome, done, timeout)) from stop
        if not finished:
            self.loop.call_soon_threadsafe(lambda: outcome.task and outcome.task.cancel())
            raise TimeoutError(f"no answer within {timeout}s")
        if outcome.error is not None:
            raise outcome.error
        return cast(T, outcome.value)

    @staticmethod
    def _outcome(outcome: _Outcome, done: gevent.event.Event, timeout: float) -> Exception | None:
        """The outcome of a request whose greenlet is being killed: wait for it through any
        further kill, so a publish the server stored is never left uncounted."""
        deadline = time.monotonic() + timeout
        while not done.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(gevent.GreenletExit):
                done.wait(max(0.0, deadline - time.monotonic()))
        if not done.is_set():
            return TimeoutError(f"no answer within {timeout}s")
        return outcome.error


class Interrupted(gevent.GreenletExit):
    """The greenlet was stopped while its request was in flight; `error` is the request's
    outcome (None: it succeeded)."""

    def __init__(self, error: Exception | None) -> None:
        super().__init__()
        self.error = error
