"""A stop's bound: from the first request to stop, the process ends within a deadline, saying
where it was. The bound runs on a thread of its own, so it holds wherever the main thread is
stuck then (a call into the JVM that never returns), not only once the shutdown has begun."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

log = logging.getLogger(__name__)


class StopSteps:
    """What a stop is doing and what took long so far: a stop past its deadline says where it
    was (on a loaded machine, a batch, Spark's own stop or a server may be slow to answer)."""

    SLOW_S = 2.0

    def __init__(self) -> None:
        self.current: str | None = None
        self.began = 0.0
        self.slow: list[str] = []
        self.started = False

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.started = True
        self.began = began = time.monotonic()
        self.current = name
        try:
            yield
        finally:
            took = time.monotonic() - began
            self.current = None
            if took >= self.SLOW_S:
                self.slow.append(f"{name} {took:.1f} s")
                log.info("stopping %s took %.1f s", name, took)

    def describe(self) -> str:
        current = self.current
        now = (
            f"still stopping {current}, for {time.monotonic() - self.began:.1f} s" if current else "stopping"
        )
        return now + (f"; before that {', '.join(self.slow)}" if self.slow else "")


# The replicator's own package, wherever it is installed (site-packages too).
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _ours(filename: str) -> bool:
    """A frame of the replicator's, or of whatever runs it (not Python's or a library's)."""
    paths = sysconfig.get_paths()
    libraries = tuple({paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    return filename.startswith(_PACKAGE) or not filename.startswith(libraries)


def where_thread_is(thread: threading.Thread) -> str:
    """Where `thread` is: its innermost frame, and the innermost of the replicator's own frames
    that led there ("socket.py:720 in readinto, from runner.py:170 in run"): the call that does
    not return, and who made it."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "not running"

    def named(f: FrameType) -> str:
        return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} in {f.f_code.co_name}"

    innermost = named(frame)
    while frame is not None:
        if _ours(frame.f_code.co_filename):
            ours = named(frame)
            return innermost if ours == innermost else f"{innermost}, from {ours}"
        frame = frame.f_back
    return innermost


class StopDeadline:
    """Ends the process `seconds` after `start` (the first request to stop) unless `done` came
    first. `steps` says what the shutdown is doing; before the shutdown began, where `watched`
    (the thread running the replicator) is stuck is named instead."""

    def __init__(
        self, seconds: float, steps: StopSteps, exit_now: Callable[[int], object] = os._exit
    ) -> None:
        self.seconds = seconds
        self.steps = steps
        self._exit_now = exit_now
        self.watched = threading.main_thread()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._due: float | None = None
        self._expired = False

    def start(self) -> None:
        """Idempotent: a second request keeps the first deadline."""
        with self._lock:
            if self._due is not None:
                return
            self._due = time.monotonic() + self.seconds
        threading.Thread(target=self._watch, name="stop-deadline", daemon=True).start()

    def remaining(self) -> float:
        return max(0.0, (self._due or time.monotonic() + self.seconds) - time.monotonic())

    def done(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        if not self._done.wait(self.remaining()):
            self.expire()

    def expire(self) -> None:
        with self._lock:
            if self._expired or self._done.is_set():
                return
            self._expired = True
        where = (
            self.steps.describe()
            if self.steps.started
            else f"the running thread is in {where_thread_is(self.watched)}"
        )
        log.error("clean stop took longer than %.0fs (%s); exiting now", self.seconds, where)
        self._exit_now(1)
