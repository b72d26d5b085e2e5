"""Shared fixtures: real NATS servers (see tests/nats_servers.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

from nats_servers import NatsCluster, nats_cluster

# Spark's Python workers must run this interpreter (the venv's), whatever PATH says.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

# Property tests check what is computed, never how fast: hypothesis's 200 ms deadline per example
# failed a header-parsing property on a machine loaded by the integration tests beside it.
settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")


@pytest.fixture
def nats_server() -> Iterator[NatsCluster]:
    """A single JetStream server (the target side in most tests)."""
    with nats_cluster(1, "target") as c:
        yield c


@pytest.fixture
def source_server() -> Iterator[NatsCluster]:
    """A second, independent single JetStream server."""
    with nats_cluster(1, "source") as c:
        yield c


@pytest.fixture
def source_cluster() -> Iterator[NatsCluster]:
    """A 3-node JetStream cluster with routes (a data centre)."""
    with nats_cluster(3, "dc1") as c:
        yield c


@pytest.fixture(params=[1, 3], ids=["single-target", "r3-target"])
def target_of_each_kind(request: pytest.FixtureRequest) -> Iterator[tuple[NatsCluster, int]]:
    """A target as production runs it either way: one server, or a 3-node cluster whose streams
    keep 3 replicas (acks come after replication; refusals are made by the stream leader).
    Yields the cluster and the replicas its streams should have."""
    with nats_cluster(request.param, "target") as c:
        yield c, request.param


@pytest.fixture
def source_like_target(target_of_each_kind: tuple[NatsCluster, int]) -> Iterator[NatsCluster]:
    """A source of the same kind as `target_of_each_kind`: one server, or a 3-node cluster."""
    _, replicas = target_of_each_kind
    with nats_cluster(replicas, "source") as c:
        yield c
