"""The JVM's console output (Spark's log4j lines, the JVM's own notices, Python workers'
stderr) read from a pipe and passed on through Python's logging: it then goes where the
replicator's own lines go (`logfile`, `log_format: json`), and start-up chatter that means
nothing to an operator is dropped unless `loglevel: debug`."""

from __future__ import annotations

import logging
import re
import threading
from typing import IO

log = logging.getLogger("spark")

# Printed by the JVM or Spark on every start, whatever the log configuration says.
_CHATTER = (
    re.compile(r"^WARNING: Using incubator modules"),
    re.compile(r"^Setting default log level to "),
    re.compile(r"^To adjust logging level use sc\.setLogLevel"),
    re.compile(r'^Setting Spark log level to "'),
)
# Spark's log4j patterns: ours (log4j2-quiet.properties) and Spark's default one.
_LOG4J_LINE = re.compile(
    r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ |\d\d/\d\d/\d\d \d\d:\d\d:\d\d )"
    r"(?P<level>ERROR|WARN|INFO|DEBUG|TRACE|FATAL) (?:spark\.)?(?P<logger>[\w.$-]+): (?P<message>.*)$"
)
_LEVELS = {
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": logging.DEBUG,
}


# A batch that failed (our foreachBatch raised, or a read task did: a server went away): the
# replicator logs the reason in one line and retries, so Spark's copies of it (Java stack traces
# wrapping the Python one) are noise unless debugging.
_BATCH_FAILED = re.compile(
    r"terminated with error|FOREACH_BATCH_USER_FUNCTION_ERROR|Exception in task|Lost task|"
    r"failed \d+ times?; aborting job"
)


_QUERY_THREAD_DIED = 'Exception in thread "stream execution thread'


class JvmOutput:
    """Classifies the JVM's lines one after another: a stack trace that follows a record being
    dropped is dropped with it."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._dropping = False

    def classify(self, line: str) -> tuple[int, str] | None:
        out = classify(line, self.quiet)
        if out is None or not self.quiet:
            return out
        if line.startswith(_QUERY_THREAD_DIED):
            # Seen once when a query was stopped under a failing batch (a StackOverflowError in
            # Spark's regex code, a thousand frames deep): the runner restarts the query; the
            # one line says what happened, the frames are left to debug.
            self._dropping = True
            return out
        if _LOG4J_LINE.match(line.rstrip("\r\n")):
            self._dropping = bool(_BATCH_FAILED.search(line))
            return (logging.DEBUG, out[1]) if self._dropping else out
        return None if self._dropping else out


def classify(line: str, quiet: bool) -> tuple[int, str] | None:
    """The level and text to log for one line of JVM output; None to drop it."""
    line = line.rstrip("\r\n")
    if not line.strip():
        return None
    if quiet and any(p.match(line) for p in _CHATTER):
        return None
    m = _LOG4J_LINE.match(line)
    if m:
        return _LEVELS[m["level"]], f"{m['logger']}: {m['message']}"
    # A stack trace's lines, a Python worker's traceback, a JVM notice: shown as they are.
    return logging.WARNING, line


def forward_jvm_output(stream: IO[bytes], quiet: bool) -> threading.Thread:
    """Start a daemon thread that logs each line of `stream` until it closes."""

    lines = JvmOutput(quiet)

    def _pump() -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                out = lines.classify(raw.decode("utf-8", "replace"))
                if out is not None:
                    log.log(*out)

    t = threading.Thread(target=_pump, name="jvm-output", daemon=True)
    t.start()
    return t
