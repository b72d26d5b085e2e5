"""The tests' servers are what they claim: in a Docker container started by testcontainers
where an engine answers (CI starts one and sets SR_NATS_SERVERS=container), the venv's
nats-server binary otherwise, a 3-server cluster included. Proven from the outside: which
process listens on each server's port, and where it runs."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from helpers import publish_once_led

from harness.localnats import NatsCluster, nats_server_binary
from harness.servers import docker_available, nats_cluster, server_backend

pytestmark = pytest.mark.integration


def listener_pid(port: int) -> int:
    """The process holding the loopback socket that listens on `port` (this network namespace's
    /proc/net/tcp names the socket's inode; a process's fd table names the sockets it holds)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(fields[9])
    assert inodes, f"nothing listens on {port}"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in {f"socket:[{i}]" for i in inodes} for fd in fds):
                return int(pid)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    raise AssertionError(f"no process holds the socket listening on {port}")


def mount_namespace(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


async def r3_stream_everywhere(cluster: NatsCluster) -> list[str]:
    """An R3 stream stores a message on all three servers: the servers' names it is placed on."""
    nc = await nats.connect(cluster.url.split(","))
    try:
        js = nc.jetstream()
        await js.add_stream(name="PROOF", subjects=["proof"], num_replicas=3)
        await publish_once_led(js, "proof", b"kept")
        info = await js.stream_info("PROOF")
        assert info.cluster is not None and info.state.messages == 1
        return sorted([info.cluster.leader or "", *(r.name for r in info.cluster.replicas or [])])
    finally:
        await nc.close()


async def r1_stream(cluster: NatsCluster) -> None:
    nc = await nats.connect(cluster.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="PROOF", subjects=["proof"])
        await js.publish("proof", b"kept")
    finally:
        await nc.close()


async def stored(cluster: NatsCluster) -> int:
    """The stream's messages, once it answers: after a server's kill -9 its group may first
    elect a new leader."""
    nc = await nats.connect(cluster.url.split(","))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                return (await nc.jetstream().stream_info("PROOF")).state.messages
            except nats.errors.Error:  # timeouts, no responders, no leader yet
                if time.monotonic() > deadline:
                    raise
    finally:
        await nc.close()


@pytest.fixture
def container_trio() -> Iterator[NatsCluster]:
    if not docker_available() and os.environ.get("SR_NATS_SERVERS") != "container":
        pytest.skip("no Docker engine answers here; CI starts one (.ci/run)")
    with nats_cluster(3, "boxed", backend="container") as c:
        yield c


def test_a_container_cluster_runs_each_server_in_its_own_container(container_trio: NatsCluster) -> None:
    from harness.nats_containers import ContainerNatsServer, docker_client, nats_image

    client = docker_client()
    ours = mount_namespace("self")
    for server in container_trio.servers:
        assert isinstance(server, ContainerNatsServer) and server.container is not None
        box = client.containers.get(server.container.get_wrapped_container().id)
        assert box.status == "running" and box.attrs["Config"]["Image"] == nats_image()
        pid = listener_pid(server.port)
        assert pid == server.container_pid(), "the port's listener is the container's process"
        assert mount_namespace(pid) != ours, "and it runs in the container's file system"
    names = asyncio.run(r3_stream_everywhere(container_trio))
    assert names == sorted(s.name for s in container_trio.servers)

    server = container_trio.servers[0]
    before = server.container_pid()
    server.kill9()
    server.start()
    assert listener_pid(server.port) == server.container_pid() != before
    assert asyncio.run(stored(container_trio)) == 1


def test_a_container_server_killed_and_started_again_finds_its_store(container_trio: NatsCluster) -> None:
    """Alone (no other replica could answer for it): the store is on the host, not in the container."""
    with nats_cluster(1, "alone", backend="container") as alone:
        asyncio.run(r1_stream(alone))
        alone.servers[0].kill9()
        alone.servers[0].start()
        assert asyncio.run(stored(alone)) == 1
        with pytest.raises(RuntimeError, match="still running"):
            alone.servers[0].start()  # as a second binary on its port would not start


def test_the_binary_cluster_is_this_venvs_nats_server_as_child_processes() -> None:
    with nats_cluster(3, "bare", backend="binary") as c:
        for server in c.servers:
            pid = listener_pid(server.port)
            assert server.proc is not None and pid == server.proc.pid
            assert os.readlink(f"/proc/{pid}/exe") == os.path.realpath(nats_server_binary())
            assert mount_namespace(pid) == mount_namespace("self")
        assert asyncio.run(r3_stream_everywhere(c)) == sorted(s.name for s in c.servers)


def test_the_suites_fixtures_run_the_servers_sr_nats_servers_chooses(source_cluster: NatsCluster) -> None:
    """What every other test gets: containers when CI asks for them (SR_NATS_SERVERS=container)."""
    backend = server_backend()
    ours = mount_namespace("self")
    for server in source_cluster.servers:
        in_container = mount_namespace(listener_pid(server.port)) != ours
        assert in_container == (backend == "container"), backend
