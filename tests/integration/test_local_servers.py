"""The harness's local nats-servers start even when a port it picked is taken meanwhile (by
any process's outgoing connection, as happened in CI): the cluster starts again on others."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from harness import localnats

pytestmark = pytest.mark.integration


@pytest.fixture
def taken_port() -> Iterator[int]:
    # Bound, not listening: what an outgoing connection's port is to a server that wants it.
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        yield int(s.getsockname()[1])


def test_a_cluster_starts_again_on_other_ports_when_one_is_taken(
    taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = localnats.free_port
    handed = iter([taken_port])
    monkeypatch.setattr(localnats, "free_port", lambda: next(handed, None) or real())
    with localnats.local_cluster(3, "ports") as cluster:
        ports = [s.port for s in cluster.servers]
        assert taken_port not in ports and len(set(ports)) == 3
        localnats.wait_jetstream(cluster.url)


def test_free_ports_are_below_the_kernels_ephemeral_range() -> None:
    low, _ = localnats._ephemeral_range()
    assert all(20_000 <= localnats.free_port() < low for _ in range(50))
