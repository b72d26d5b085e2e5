"""The monitoring endpoint: metrics, liveness, and readiness per stream."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from harness.localnats import free_port
from replicator.monitor import Readiness, StreamState, serve


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_ready_only_once_every_stream_replicates() -> None:
    readiness = Readiness()
    port = free_port()
    server = serve(port, readiness, host="127.0.0.1")
    assert server is not None
    try:
        base = f"http://127.0.0.1:{port}"
        assert _get(f"{base}/healthz") == (200, b"ok\n")
        code, body = _get(f"{base}/readyz")
        assert code == 503 and json.loads(body) == {"ready": False, "streams": {}}
        readiness.set("S/a", StreamState.REPLICATING)
        readiness.set("S/b", StreamState.WAITING_FOR_SOURCE)
        code, body = _get(f"{base}/readyz")
        assert code == 503 and json.loads(body)["streams"] == {
            "S/a": "replicating",
            "S/b": "waiting for source",
        }
        readiness.set("S/b", StreamState.REPLICATING)
        assert _get(f"{base}/readyz")[0] == 200
        code, body = _get(f"{base}/metrics")
        assert code == 200 and b"# HELP" in body
        assert _get(f"{base}/nope")[0] == 404
    finally:
        server.shutdown()


def test_no_port_no_server() -> None:
    assert serve(0, Readiness()) is None


@pytest.mark.parametrize("state", list(StreamState))
def test_only_replicating_and_standing_by_are_ready(state: StreamState) -> None:
    r = Readiness()
    r.set("S/a", state)
    # A standby of a leader-elected entry is doing its job: ready for the service manager.
    assert r.ready() is (state in (StreamState.REPLICATING, StreamState.STANDBY))


def test_the_monitor_binds_the_address_it_is_given() -> None:
    port = free_port()
    server = serve(port, Readiness(), host="127.0.0.1")
    assert server is not None
    try:
        assert server.server_address[:2] == ("127.0.0.1", port)
        assert _get(f"http://127.0.0.1:{port}/healthz") == (200, b"ok\n")
    finally:
        server.shutdown()


def test_thread_stacks_are_served_only_with_profiling_on() -> None:
    """Choria's `profiling` serves Go's profiler on the monitor port; ours serves every Python
    thread's stack there (Spark's own UI opens too: runner)."""
    for profiling in (False, True):
        port = free_port()
        server = serve(port, Readiness(), host="127.0.0.1", profiling=profiling)
        assert server is not None
        try:
            code, body = _get(f"http://127.0.0.1:{port}/debug/threads")
            if profiling:
                assert code == 200 and b"thread monitor" in body and b"serve_forever" in body
            else:
                assert code == 404
        finally:
            server.shutdown()


def test_a_process_without_streams_is_ready_once_it_runs() -> None:
    r = Readiness()
    assert not r.ready()
    r.set_without_streams()  # heartbeats only
    assert r.ready()
    r.set_without_streams(False)  # its heartbeats stopped
    assert not r.ready()
