"""Logging setup from the config's loglevel/logfile/log_format, and loggers that say which
stream a line is about.

A line about one stream carries it as the record attribute `stream` (its `stream/name`
label): text lines print it before the message, JSON lines as a field of its own, so a log
shipper can filter on it."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Literal

from pythonjsonlogger.json import JsonFormatter

LogFormat = Literal["text", "json"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(stream_prefix)s%(message)s"
JSON_FIELDS = ["asctime", "levelname", "name", "stream", "message"]


class StreamLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger whose every line is about one stream."""

    def __init__(self, logger: logging.Logger, stream: str) -> None:
        super().__init__(logger, {"stream": stream})

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


def stream_logger(name: str, stream: str) -> StreamLogger:
    """`logging.getLogger(name)` whose lines say they are about `stream`."""
    return StreamLogger(logging.getLogger(name), stream)


class _StreamField(logging.Filter):
    """Gives every record `stream`: None when the line is about the process."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.stream = getattr(record, "stream", None)
        return True


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stream = getattr(record, "stream", None)
        record.stream_prefix = f"{stream}: " if stream else ""
        return super().format(record)


def make_formatter(fmt: LogFormat) -> logging.Formatter:
    if fmt == "json":
        # One object a line; `stream` is null on process-wide lines.
        return JsonFormatter(
            JSON_FIELDS,
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            timestamp=False,
        )
    return _TextFormatter(TEXT_FORMAT)


def setup_logging(level: str = "info", logfile: str = "", fmt: LogFormat = "text") -> None:
    handler: logging.Handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(fmt))
    handler.addFilter(_StreamField())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS.get(level, logging.INFO))
    # py4j is chatty at info level.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if root.level > logging.DEBUG:
        logging.getLogger("py4j.clientserver").addFilter(_drop_batch_tracebacks)


def _drop_batch_tracebacks(record: logging.LogRecord) -> bool:
    """py4j logs the traceback of every exception our foreachBatch raises; the replicator logs
    its reason in one line and retries, so the traceback is left to `loglevel: debug`."""
    return not str(record.msg).startswith("There was an exception while executing the Python Proxy")
