"""nats-py (asyncio) inside locust (gevent): one native thread runs the asyncio loop.

Mixing them naively fails: a loop per user inside its greenlet refuses to run
("Cannot run the event loop while another loop is running"), and starting the loop thread
from `on_start` races. What works: one real OS thread (gevent's original `start_new_thread`)
running asyncio on the original, unpatched selector, started once; greenlets submit
coroutines with `run_coroutine_threadsafe` and sleep on a gevent event that the loop thread
sets through the hub's thread-safe callback, so waiting never blocks other users.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import gevent
import gevent.event
import gevent.monkey

T = TypeVar("T")


class AsyncioBridge:
    def __init__(self) -> None:
        selector_cls = gevent.monkey.get_original("selectors", "DefaultSelector")
        self.loop = asyncio.SelectorEventLoop(selector_cls())
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

        If the greenlet is killed meanwhile (locust stopping a user), the request is already
        on the wire: wait for its outcome, so the caller can still account for it,
        and raise `Interrupted` carrying it."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        done = gevent.event.Event()
        hub = gevent.get_hub()
        fut.add_done_callback(lambda _: hub.loop.run_callback_threadsafe(done.set))
        try:
            finished = done.wait(timeout)
        except gevent.GreenletExit as stop:
            raise Interrupted(self._outcome(fut, done, timeout)) from stop
        if not finished:
            fut.cancel()
            raise TimeoutError(f"no answer within {timeout}s")
        return fut.result()

    @staticmethod
    def _outcome(
        fut: concurrent.futures.Future[Any], done: gevent.event.Event, timeout: float
    ) -> Exception | None:
        """The outcome of a request whose greenlet is being killed: wait for it on the gevent
        event (a concurrent future's own wait is not safe across the loop thread under gevent),
        through any further kill, so a publish the server stored is never left uncounted."""
        deadline = time.monotonic() + timeout
        while not done.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(gevent.GreenletExit):
                done.wait(max(0.0, deadline - time.monotonic()))
        if not done.is_set():
            return TimeoutError(f"no answer within {timeout}s")
        if fut.cancelled():
            return TimeoutError("cancelled")
        error = fut.exception()
        return error if isinstance(error, Exception) or error is None else RuntimeError(repr(error))


class Interrupted(gevent.GreenletExit):
    """The greenlet was stopped while its request was in flight; `error` is the request's
    outcome (None: it succeeded)."""

    def __init__(self, error: Exception | None) -> None:
        super().__init__()
        self.error = error
