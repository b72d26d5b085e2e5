"""The NATS permissions docs/operations.md lists are enough: a replicator whose users may do only
what that section allows copies a stream, samples another with reliable advisories, campaigns
in a leader election and sends heartbeats, and no server refuses it anything. A request they
refuse is logged with its subject and where to read what to allow."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from helpers import SLOW_S, registration, run, start_replicator, wait_for, wait_handled, write_config
from nats.js.api import KeyValueConfig, StreamConfig
from nats_servers import NatsCluster, nats_cluster

from harness.streams import copy_differences
from replicator.nats.connect import PERMISSION_HINT, open_connection
from replicator.nats.jetstream import stream_info

pytestmark = pytest.mark.integration

ADMIN, REPL = "admin-pw", "repl-pw"
OPERATIONS_MD = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SENDERS = 100  # helpers.registration's senders


def documented_permissions(side: str) -> str:
    """The `permissions` block docs/operations.md gives for the `side` cluster's user."""
    text = OPERATIONS_MD.read_text()
    found = re.search(rf"```text\n# the {side} cluster's user\n(permissions: \{{.*?\n\}})\n```", text, re.S)
    assert found, f"docs/operations.md has no permissions block for the {side} cluster"
    return found.group(1)


def users(side: str, without: str = "") -> str:
    """The server's users: an admin, and `repl` with the documented permissions (less the
    allowed subject `without`)."""
    permissions = documented_permissions(side)
    if without:
        assert f'"{without}"' in permissions
        permissions = permissions.replace(f'"{without}"', '"_NOT.ALLOWED"')
    return (
        f'authorization {{ users: [{{user: admin, password: "{ADMIN}"}},\n'
        f'{{user: repl, password: "{REPL}", {permissions}}}] }}'
    )


@dataclass
class Clusters:
    source: NatsCluster
    target: NatsCluster

    def url(self, side: str, user: str) -> str:
        server = self.source if side == "source" else self.target
        password = ADMIN if user == "admin" else REPL
        return f"nats://{user}:{password}@127.0.0.1:{server.servers[0].port}"


@contextlib.contextmanager
def secured_clusters(source_without: str = "") -> Iterator[Clusters]:
    """A source and a target server whose `repl` user has the documented permissions (the
    source's less `source_without`)."""
    admin = {"user": "admin", "password": ADMIN}
    with (
        nats_cluster(1, "perm-src", users("source", source_without), connect=admin) as source,
        nats_cluster(1, "perm-dst", users("target"), connect=admin) as target,
    ):
        yield Clusters(source, target)


@pytest.fixture
def clusters() -> Iterator[Clusters]:
    with secured_clusters() as c:
        yield c


async def prepare_source(url: str, direct_election: bool) -> None:
    """As an operator would: the streams, the election bucket (with or without direct gets)
    and the heartbeats' stream, created by an admin."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        # Without direct gets: its reads go through consumers, and their permissions are tried.
        await js.add_stream(StreamConfig(name="NODE_DATA", subjects=["NODE_DATA.>"], allow_direct=False))
        await js.add_stream(
            StreamConfig(
                name="CHORIA_REGISTRATION", subjects=["choria.stream.input.registration.>"], allow_direct=True
            )
        )
        await js.add_stream(StreamConfig(name="ADVISORIES", subjects=["choria.registration.advisories.>"]))
        await js.add_stream(StreamConfig(name="MONITOR", subjects=["choria.node_metadata._monitor"]))
        # A TTL that outlives the stop between the runs: each second campaign finds its key's
        # delete marker, and reads it.
        await js.create_key_value(
            KeyValueConfig(bucket="CHORIA_LEADER_ELECTION", ttl=60, direct=direct_election)
        )
    finally:
        await nc.close()


async def publish_fleet(url: str, first: int, n: int) -> None:
    """Messages first..first+n-1 of the fleet, to both source streams."""
    nc = await nats.connect(url)
    try:
        js, acks = nc.jetstream(), []
        for i in range(first, first + n):
            acks.append(await js.publish_async(f"NODE_DATA.node{i % SENDERS}", registration(i, 500)))
            acks.append(
                await js.publish_async(
                    f"choria.stream.input.registration.node{i % SENDERS}", registration(i, 500)
                )
            )
        await asyncio.gather(*acks)
    finally:
        await nc.close()


async def stored(url: str, stream: str) -> int:
    nc = await nats.connect(url)
    try:
        info = await stream_info(nc, stream)
        return 0 if info is None else int(info.state.messages)
    finally:
        await nc.close()


def violations(c: Clusters) -> list[str]:
    lines = []
    for server in (*c.source.servers, *c.target.servers):
        assert server.log_file is not None
        lines += [
            line for line in server.log_file.read_text(errors="replace").splitlines() if "Violation" in line
        ]
    return lines


@pytest.mark.parametrize("direct_election", [True, False], ids=["election-direct", "election-leader-gets"])
def test_the_documented_permissions_are_enough(
    clusters: Clusters, tmp_path: Path, direct_election: bool
) -> None:
    c, messages = clusters, 1000
    admin_src, admin_dst = c.url("source", "admin"), c.url("target", "admin")
    run(prepare_source(admin_src, direct_election))
    run(publish_fleet(admin_src, 0, messages))
    src, dst = c.url("source", "repl"), c.url("target", "repl")
    entries = [
        # The filter makes the entry ask the leader for its last matching message (STREAM.MSG.GET).
        {"name": "nodes", "stream": "NODE_DATA", "source_url": src, "target_url": dst, "filter_subject": "NODE_DATA.>",
         "target_stream": "FLEET_NODES", "target_subject_prefix": "FLEET_NODES", "target_subject_remove": "NODE_DATA",
         "leader_election_name": "a"},
        {"name": "registration", "stream": "CHORIA_REGISTRATION", "source_url": src, "target_url": dst,
         "inspect_field": "sender", "inspect_duration": "1h", "leader_election_name": "a",
         "advisory": {"subject": "choria.registration.advisories.%s.%v", "reliable": True}},
    ]  # fmt: skip
    heartbeats = {"url": src, "interval": "1s", "leader_election": True,
                  "subjects": [{"subject": "choria.node_metadata._monitor"}]}  # fmt: skip
    config = write_config(tmp_path / "sr.yaml", "dc1", entries, heartbeats=heartbeats)
    out = ""
    # The second run starts where the target's copies end: it reads the targets' last copies.
    for run_number in (1, 2):
        rep = start_replicator(config)
        try:
            wait_handled(rep, admin_src, "NODE_DATA")
            wait_handled(rep, admin_src, "CHORIA_REGISTRATION")
            wait_for(lambda: run(stored(admin_src, "ADVISORIES")) >= SENDERS, SLOW_S, "the advisories", rep)
            # Caught up, the planners wait for news on the streams' subjects (their subscriptions):
            # two heartbeats more give them the time to.
            beats = run(stored(admin_src, "MONITOR")) + 2
            wait_for(lambda n=beats: run(stored(admin_src, "MONITOR")) >= n, SLOW_S, "heartbeats", rep)
        finally:
            stopped = rep.stop()
        assert stopped == 0, rep.output()
        out += rep.output(10**9)
        if run_number == 1:
            run(publish_fleet(admin_src, messages, messages))
    assert violations(c) == []
    assert "permissions violation" not in out.lower(), out  # the servers' refusals, as the client saw them
    assert run(copy_differences(admin_src, "NODE_DATA", admin_dst, "FLEET_NODES")) == []
    # Each sender's first message, and its `new`: the second run's messages came within the hour.
    assert run(stored(admin_dst, "CHORIA_REGISTRATION")) == SENDERS
    assert run(stored(admin_src, "ADVISORIES")) == SENDERS


def test_a_refused_request_is_logged_with_the_subject_and_the_fix(tmp_path: Path) -> None:
    with secured_clusters(source_without="choria.registration.advisories.>") as c:
        run(prepare_source(c.url("source", "admin"), direct_election=True))
        run(publish_fleet(c.url("source", "admin"), 0, 200))
        entry = {"name": "registration", "stream": "CHORIA_REGISTRATION", "source_url": c.url("source", "repl"),
                 "target_url": c.url("target", "repl"), "inspect_field": "sender", "inspect_duration": "1h",
                 "advisory": {"subject": "choria.registration.advisories.%s.%v", "reliable": True}}  # fmt: skip
        rep = start_replicator(write_config(tmp_path / "sr.yaml", "dc1", [entry]))
        refused = 'permissions violation for publish to "choria.registration.advisories.new.node'
        try:
            wait_for(lambda: refused in rep.output(10**9), SLOW_S, "the refusal's line", rep)
        finally:
            rep.stop()
        line = next(line for line in rep.output(10**9).splitlines() if refused in line)
        assert line.endswith(PERMISSION_HINT), line
        assert run(stored(c.url("source", "admin"), "ADVISORIES")) == 0


def test_a_subject_refused_again_and_again_is_logged_once_per_30_s(caplog: pytest.LogCaptureFixture) -> None:
    """operations.md: the warning "is repeated at most every 30 s for each subject on each
    connection": five refused publishes to one subject in a second make one line, and another
    subject its own."""

    async def refuse_publishes(url: str) -> None:
        nc = await open_connection(url, name="refusals")
        try:
            for _ in range(5):
                await nc.publish("_NOT.ALLOWED.one", b"x")
            await nc.publish("_NOT.ALLOWED.two", b"x")
            await nc.flush()
            await asyncio.sleep(1)  # the server's -ERR lines come after the flush's PONG
        finally:
            await nc.close()

    with secured_clusters() as c, caplog.at_level(logging.WARNING, logger="replicator.nats.connect"):
        run(refuse_publishes(c.url("source", "repl")))
    lines = [r.getMessage() for r in caplog.records if "permissions violation" in r.getMessage()]
    assert [line.split('"')[1] for line in lines] == ["_not.allowed.one", "_not.allowed.two"], lines
    assert all(line.endswith(PERMISSION_HINT) for line in lines)
