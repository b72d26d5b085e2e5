"""Where a new copy with `start_time` starts: the first message stored at or after that time,
as the stream holds it, whichever server answers."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from helpers import create_stream, delete_messages, publish_raw, run, wait_for
from nats_servers import NatsCluster

from replicator.nats import jetstream
from replicator.nats.connect import open_connection
from replicator.nats.readers import leader_message
from replicator.options import ReaderOptions
from replicator.spark.datasource import choose_initial_offset

pytestmark = pytest.mark.integration


async def _start(url: str, stream: str, when: datetime) -> int:
    nc = await open_connection(url)
    try:
        return int(
            (await choose_initial_offset(nc, ReaderOptions(url=url, stream=stream, start_time=when)))["seq"]
        )
    finally:
        await nc.close()


async def _stored_at(url: str, stream: str, seq: int) -> datetime:
    """When message `seq` was stored, to the microsecond (a datetime's precision), rounded down."""
    nc = await open_connection(url)
    try:
        m = await leader_message(nc, stream, seq)
    finally:
        await nc.close()
    assert m is not None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=m.ts_ns // 1000)


@pytest.mark.parametrize(
    ("servers", "direct"),
    [("nats_server", True), ("nats_server", False), ("source_cluster", True)],
    ids=["direct-gets", "leader-gets", "r3-direct-gets"],
)
@pytest.mark.parametrize("answers", ["as-stored", "none"])
def test_a_copy_from_a_start_time_starts_at_the_first_message_stored_since(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, answers: str, servers: str, direct: bool
) -> None:
    """A replica behind answers a direct get for the start time with "none" when it does not
    hold the messages stored since yet, and a file store's search can say "none" where live
    messages lie past deleted ones: the copy started after the stream's last message, and
    those were never copied. Now "none" stands only where the leader's last message is older;
    else its messages are searched, stepping over deleted ones, also where the last one is
    deleted (`answers="none"` stands in for such a server)."""
    cluster: NatsCluster = request.getfixturevalue(servers)
    url = cluster.url
    replicas = len(cluster.servers)
    run(create_stream(url, "S", ["s.>"], allow_direct=direct, num_replicas=replicas))
    run(publish_raw(url, [("s.old", b"x", [])] * 5))
    time.sleep(0.05)
    cut = datetime.now(UTC)
    time.sleep(0.05)
    run(publish_raw(url, [("s.new", b"y", [])] * 4))  # 6 to 9
    run(delete_messages(url, "S", [6]))
    asked = jetstream.sequence_at_time

    async def answer(nc: object, stream: str, when: datetime, direct: bool) -> int | None:
        return None if answers == "none" else await asked(nc, stream, when, direct)  # type: ignore[arg-type]

    monkeypatch.setattr(jetstream, "sequence_at_time", answer)
    assert run(_start(url, "S", cut)) == 7
    # A start time at message 8's microsecond (its stored time rounded down): 8 is the first.
    assert run(_start(url, "S", run(_stored_at(url, "S", 8)))) == 8
    # Nothing since: the copy starts after the last message, whoever answered.
    assert run(_start(url, "S", datetime.now(UTC) + timedelta(seconds=1))) == 10
    # The last message deleted: the leader cannot show it, and its messages are searched.
    run(delete_messages(url, "S", [9]))
    assert run(_start(url, "S", cut)) == 7


def test_a_message_with_its_own_status_header_is_found_by_its_time(
    target_of_each_kind: tuple[NatsCluster, int],
) -> None:
    """A stored message's own `Status` header (a copy carries its source's) is not the reply's
    status: the server's answer names the message found (a single server, and an R3 stream)."""
    cluster, replicas = target_of_each_kind
    url = cluster.url
    run(create_stream(url, "ST", ["st.>"], num_replicas=replicas))
    before = datetime.now(UTC) - timedelta(seconds=5)
    seqs = run(publish_raw(url, [("st.a", b"x", [("Status", "404"), ("Description", "mine")])]))

    async def ask() -> int | None:
        nc = await open_connection(url)
        try:
            return await jetstream.sequence_at_time(nc, "ST", before, direct=True)
        finally:
            await nc.close()

    # A replica not holding the message yet answers none (first_sequence_at then asks the
    # leader): asked until each does, the answer must name it. Before the fix it never did.
    answers: list[int | None] = []
    wait_for(
        lambda: answers.append(run(ask())) or answers[-1] == seqs[0],
        30,
        f"an answer naming sequence {seqs[0]}",
    )
