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

    def _pump() -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                out = classify(raw.decode("utf-8", "replace"), quiet)
                if out is not None:
                    log.log(*out)

    t = threading.Thread(target=_pump, name="jvm-output", daemon=True)
    t.start()
    return t
