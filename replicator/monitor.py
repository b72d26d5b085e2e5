"""The monitoring endpoint on `monitor_port`: `/metrics` (Prometheus), `/healthz` (the process
answers) and `/readyz` (every stream's state; 200 once each one replicates, 503 before).

Readiness is what tests, scenarios, benchmarks and operators wait on: a stream is `replicating`
once its Spark query has started on the source and target.
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from replicator.metrics import exposition


class StreamState(StrEnum):
    STARTING = "starting"
    WAITING_FOR_SOURCE = "waiting for source"
    REPLICATING = "replicating"
    STANDBY = "standby"  # campaigning for the leadership of a leader-elected entry
    RETRYING = "retrying"
    STOPPED = "stopped"


class Readiness:
    """Each stream's state, by its label (`stream/name`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, StreamState] = {}
        self._without_streams = False

    def set(self, label: str, state: StreamState) -> None:
        with self._lock:
            self._states[label] = state

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return {k: str(v) for k, v in self._states.items()}

    def set_without_streams(self, ready: bool = True) -> None:
        """A process with nothing to replicate (heartbeats only) is ready while it runs them."""
        with self._lock:
            self._without_streams = ready

    def ready(self) -> bool:
        with self._lock:
            if self._without_streams:
                return True
            return bool(self._states) and all(
                v in (StreamState.REPLICATING, StreamState.STANDBY) for v in self._states.values()
            )


def thread_stacks() -> str:
    """Every Python thread's stack, as Go's /debug/pprof/goroutine?debug=2 lists goroutines."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        parts.append(f"thread {names.get(ident, '?')} ({ident}):\n{stack}")
    return "\n".join(parts)


class _Handler(BaseHTTPRequestHandler):
    readiness: Readiness
    profiling: bool

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, exposition(), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif path == "/readyz":
            ready = self.readiness.ready()
            body = json.dumps({"ready": ready, "streams": self.readiness.snapshot()}).encode()
            self._send(200 if ready else 503, body, "application/json")
        elif path == "/debug/threads" and self.profiling:
            self._send(200, thread_stacks().encode(), "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # scrapes every few seconds: not logged
        pass


def serve(
    port: int, readiness: Readiness, host: str = "0.0.0.0", profiling: bool = False
) -> ThreadingHTTPServer | None:
    """Serve on `port` (0: not at all) from a daemon thread; `profiling` adds /debug/threads."""
    if not port:
        return None
    handler = type("MonitorHandler", (_Handler,), {"readiness": readiness, "profiling": profiling})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="monitor", daemon=True).start()
    return server
