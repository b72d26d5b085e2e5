"""SIGTERM and SIGINT, handed to a thread of their own.

Python runs a signal handler on the main thread, between two of its steps. A handler that takes a
lock the main thread holds at that moment waits for itself forever: `threading.Event.set` takes
the lock `Event.wait` holds between its own steps, and the runner's main loop is in
`stop_event.wait` ten times a second (CPython's signal docs warn of it; CI at 9b92b67 hung so,
with "stop requested" logged and nothing after). The handler here only writes a byte to a pipe,
which takes no Python lock; the relay thread reads it and asks the runner to stop."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    def __init__(self, on_stop: Callable[[], None]) -> None:
        self._on_stop = on_stop
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # a full pipe already holds a request: never block
        threading.Thread(target=self._relay, name="stop-signals", daemon=True).start()

    def handle(self, signum: int, frame: object) -> None:
        """The signal handler: no lock, no logging, nothing that can wait."""
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"\0")

    def install(self) -> None:
        """Make this the handler of SIGTERM and SIGINT (on the main thread only, where Python
        allows it; elsewhere, such as under a test's thread, the caller's handlers stay)."""
        if threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                signal.signal(s, self.handle)

    def ignore_after_stop(self) -> None:
        """The run has ended: a signal from now on is ignored. As the interpreter exits, Python
        gives the default action (death by the signal) back to every signal it handled, so a
        second Ctrl-C while it exits would turn a clean stop's exit 0 into a kill; only an
        ignored signal stays ignored. What is left is the interpreter's own exit; SIGKILL
        still ends it."""
        if threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                signal.signal(s, signal.SIG_IGN)

    def _relay(self) -> None:
        while os.read(self._read, 64):
            try:
                self._on_stop()
            except Exception:  # the next signal must still be heard
                log.exception("handling a stop signal")
