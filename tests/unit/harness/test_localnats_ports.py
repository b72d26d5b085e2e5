"""The harness's loopback ports: never the same port to two servers, and a server that finds
its port held by another is not taken for started."""

from __future__ import annotations

import itertools
import json
import random
import socket
import threading
from collections.abc import Iterator

import pytest

from harness import localnats


class _SameFirst(random.Random):
    """Draws one port twice, then others: what a random draw can do."""

    def __init__(self, first: int) -> None:
        super().__init__(7)
        self.draws = [first, first]

    def randrange(self, *args: int) -> int:  # type: ignore[override]
        return self.draws.pop(0) if self.draws else super().randrange(*args)


def test_a_port_drawn_twice_is_handed_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    first = localnats.free_port()
    localnats._HANDED_OUT.discard(first)
    monkeypatch.setattr(localnats, "_PORTS", _SameFirst(first))
    ports = [localnats.free_port() for _ in range(3)]
    assert ports[0] == first
    assert len(set(ports)) == 3, ports


@pytest.fixture
def other_server() -> Iterator[int]:
    """A listener that greets as a NATS server named "other" does."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    info = b"INFO " + json.dumps({"server_name": "other", "port": 1}).encode() + b"\r\n"
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(info)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(2)
    listener.close()


def test_a_port_answered_by_another_server_is_not_this_servers_start(other_server: int) -> None:
    with pytest.raises(RuntimeError, match="exited \\(1\\) before listening"):
        localnats.wait_port("127.0.0.1", other_server, timeout=5, exited=lambda: 1, name="mine")


def test_the_server_named_in_the_greeting_is_taken_for_started(other_server: int) -> None:
    localnats.wait_port("127.0.0.1", other_server, timeout=5, exited=lambda: 1, name="other")


def test_a_server_that_sends_no_greeting_is_taken_for_started_while_it_runs() -> None:
    """A server that wants the TLS handshake first says nothing until the client starts it; a
    silent listener while ours has exited is another process's (a proxy, an HTTP port)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        localnats.wait_port("127.0.0.1", port, timeout=5, exited=lambda: None, name="mine")
        with pytest.raises(RuntimeError, match="exited \\(1\\) before listening"):
            localnats.wait_port("127.0.0.1", port, timeout=5, exited=lambda: 1, name="mine")


@pytest.mark.parametrize(("worker", "count"), [("gw0", "2"), ("gw1", "2"), ("gw2", "3")])
def test_each_test_worker_draws_from_its_own_share_of_the_ports(
    monkeypatch: pytest.MonkeyPatch, worker: str, count: str
) -> None:
    """Two pytest-xdist workers (and the servers and replicators they start) never draw the same
    port: each remembers only its own."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    whole = localnats.port_range()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    shares = []
    for i in range(int(count)):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{i}")
        shares.append(localnats.port_range())
    assert shares[0][0] == whole[0] and all(a[1] <= b[0] for a, b in itertools.pairwise(shares))
    assert all(whole[0] <= s[0] < s[1] <= whole[1] for s in shares)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    mine = localnats.port_range()
    assert all(mine[0] <= localnats.free_port() < mine[1] for _ in range(20))
