"""Logging setup from the config's loglevel/logfile."""

from __future__ import annotations

import logging
import sys

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def setup_logging(level: str = "info", logfile: str = "") -> None:
    handler: logging.Handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS.get(level, logging.INFO))
    # py4j and nats are chatty at info level.
    logging.getLogger("py4j").setLevel(logging.WARNING)
