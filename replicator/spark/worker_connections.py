"""NATS connections kept by a Spark Python worker across its tasks.

Spark reuses its Python workers, so a read task or a lane task finds the connection an earlier
task opened: on loopback a connection costs ~1.5 ms a task, across a long link three round
trips. The connections live on one loop thread per worker process, which answers the servers'
pings between tasks.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from replicator.nats.tls import TLSFiles

_lock = threading.Lock()
_loop: Any = None  # replicator.aio.LoopThread, made by the first task that asks
_connections: dict[tuple[str, TLSFiles | None], Any] = {}


def worker_connection(url: str, tls: TLSFiles | None, name: str) -> tuple[Any, Any]:
    """(loop, connection) to `url`: the one this worker kept, or a new one when it has none or
    its connection is no longer connected."""
    global _loop
    from replicator.aio import LoopThread
    from replicator.nats.connect import open_connection

    with _lock:
        if _loop is None:
            _loop = LoopThread("sr-worker-nats")
        key = _key(url, tls)
        nc = _connections.get(key)
        if nc is None or not nc.is_connected:
            _close(_connections.pop(key, None))
            nc = _connections[key] = _loop.run(open_connection(url, tls, name=name), 60)
        return _loop, nc


def drop_worker_connection(url: str, tls: TLSFiles | None) -> None:
    """Close the kept connection to `url` (a read failed or was abandoned): the next task opens
    a fresh one."""
    with _lock:
        _close(_connections.pop(_key(url, tls), None))


def _key(url: str, tls: TLSFiles | None) -> tuple[str, TLSFiles | None]:
    return url, tls


def _close(nc: Any) -> None:
    if nc is not None and _loop is not None:
        with contextlib.suppress(Exception):
            _loop.run(nc.close(), 5)
