"""Reading ranges of a real stream: by direct get and through the consumer fallback (streams
without `allow_direct`), in bounded chunks, every header value kept, byte for byte what the
server stores."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from helpers import create_stream, delete_messages, publish_raw, purge_stream, run, wait_for
from nats_servers import NatsCluster

from replicator.nats import readers, wire
from replicator.nats.connect import open_connection
from replicator.nats.readers import ConsumerReader, DirectReader, RangeNotHeld, RawMessage, read_chunks

pytestmark = pytest.mark.integration

REPEATED = [("X-Tag", "a"), ("Other", "1"), ("X-Tag", "b"), ("X-Tag", "c  with spaces")]


async def _chunks(url: str, stream: str, start: int, end: int, **kw: object) -> list[list[RawMessage]]:
    nc = await open_connection(url, name="test-reader")
    try:
        return [c async for c in read_chunks(nc, stream, start, end, **kw)]  # type: ignore[arg-type]
    finally:
        await nc.close()


@pytest.mark.parametrize("direct", [True, False], ids=["direct-get", "consumer"])
def test_repeated_headers_come_back_as_the_server_stores_them(nats_server: NatsCluster, direct: bool) -> None:
    url = nats_server.url
    run(create_stream(url, "H", ["h.>"], allow_direct=direct))
    run(publish_raw(url, [("h.1", b"one", REPEATED), ("h.2", b"two", [])]))
    [chunk] = run(_chunks(url, "H", 1, 3, direct=direct))
    assert [(m.seq, m.subject, m.data, m.headers) for m in chunk] == [
        (1, "h.1", b"one", REPEATED),
        (2, "h.2", b"two", None),
    ]

    # Byte for byte: the header block the server keeps is the one we encoded.
    async def stored_block() -> bytes:
        nc = await open_connection(url)
        try:
            resp = await nc.request("$JS.API.STREAM.MSG.GET.H", b'{"seq":1}', timeout=5)
            return base64.b64decode(json.loads(resp.data)["message"]["hdrs"])
        finally:
            await nc.close()

    assert run(stored_block()) == wire.header_block(wire.encode_header_lines(REPEATED))


@pytest.mark.parametrize("direct", [True, False], ids=["direct-get", "consumer"])
def test_a_range_is_read_whole_in_order_and_in_bounded_chunks(nats_server: NatsCluster, direct: bool) -> None:
    url = nats_server.url
    run(create_stream(url, "R", ["r.>"], allow_direct=direct))
    run(publish_raw(url, [(f"r.{i % 3}", b"x" * 1000, [("I", str(i))]) for i in range(1, 251)]))
    chunks = run(_chunks(url, "R", 11, 201, direct=direct, chunk_messages=40, chunk_bytes=20_000))
    seqs = [m.seq for c in chunks for m in c]
    assert seqs == list(range(11, 201))
    assert max(len(c) for c in chunks) <= 40
    if direct:  # the byte bound (max_bytes of a direct get) holds too: ~1 KB messages
        assert max(sum(len(m.data) for m in c) for c in chunks) <= 20_000
    assert [wire.first_value(m.headers, "I") for c in chunks for m in c] == [str(s) for s in seqs]


def test_a_direct_get_bound_below_one_message_still_reads_it(nats_server: NatsCluster) -> None:
    url = nats_server.url
    run(create_stream(url, "BIG", ["big"]))
    run(publish_raw(url, [("big", b"y" * 50_000, []) for _ in range(3)]))
    chunks = run(_chunks(url, "BIG", 1, 4, direct=True, chunk_bytes=1000))
    assert [m.seq for c in chunks for m in c] == [1, 2, 3]


def test_the_consumer_reader_ends_when_the_filter_matches_nothing_more(nats_server: NatsCluster) -> None:
    """A filter that matches nothing at or after the range start must end the read, not wait for
    messages that will never come (the stream has other messages past the start)."""
    url = nats_server.url
    run(create_stream(url, "F", ["f.>"], allow_direct=False))
    run(publish_raw(url, [("f.a", b"a", []), *[("f.b", b"b", []) for _ in range(20)]]))

    async def read(filter_subject: str, start: int) -> list[int]:
        nc = await open_connection(url)
        try:
            reader = ConsumerReader(nc, "F", filter_subject, chunk_messages=5, wait_s=0.5)
            return [m.seq async for c in reader.chunks(start, 22) for m in c]
        finally:
            await nc.close()

    assert run(asyncio.wait_for(read("f.a", 2), 20)) == []
    assert run(asyncio.wait_for(read("f.a", 1), 20)) == [1]
    assert run(asyncio.wait_for(read("f.b", 1), 20)) == list(range(2, 22))


def test_direct_reads_fall_back_to_the_leader_for_what_a_replica_lacks(nats_server: NatsCluster) -> None:
    url = nats_server.url
    run(create_stream(url, "L", ["l.>"]))
    run(publish_raw(url, [("l.x", b"1", REPEATED)]))

    async def leader() -> RawMessage | None:
        nc = await open_connection(url)
        try:
            return await DirectReader(nc, "L").leader_get(1)
        finally:
            await nc.close()

    m = run(leader())
    assert m is not None and (m.seq, m.data, m.headers) == (1, b"1", REPEATED)


class _ReplicaHoldingNothing(DirectReader):
    """A direct reader whose every batched get is answered by a replica that holds nothing from
    the asked sequence on (behind its leader, or just restarted): the leader must decide."""

    async def batch(self, seq: int, n: int) -> list[RawMessage]:
        return []


def test_a_deleted_message_where_a_replica_held_nothing_does_not_end_the_range(
    nats_server: NatsCluster,
) -> None:
    """The fallback asked the leader for exactly that sequence: a deleted one (a per-subject
    limit, max_age, a delete) ended the range there (issue 28, hole 7)."""
    url = nats_server.url
    run(create_stream(url, "D", ["d.>"]))
    run(publish_raw(url, [(f"d.{i}", b"x", []) for i in range(1, 11)]))
    run(delete_messages(url, "D", [4, 5, 10]))

    async def read() -> list[int]:
        nc = await open_connection(url)
        try:
            return [m.seq async for c in _ReplicaHoldingNothing(nc, "D").chunks(1, 11) for m in c]
        finally:
            await nc.close()

    assert run(read()) == [1, 2, 3, 6, 7, 8, 9]


@pytest.mark.parametrize("direct", [True, False], ids=["direct-get", "consumer"])
def test_a_range_the_streams_leader_does_not_hold_yet_is_read_again_not_ended_early(
    nats_server: NatsCluster, direct: bool
) -> None:
    """A range is planned from what the stream held; a leader just elected may hold less while
    it applies its log. Reading it then must fail (to be read again), never end short and be
    committed (issue 28, hole 7: whole sub-ranges went missing after a source leader was killed)."""
    url = nats_server.url
    run(create_stream(url, "E", ["e.>"], allow_direct=direct))
    run(publish_raw(url, [(f"e.{i % 3}", b"x", []) for i in range(20)]))
    with pytest.raises(RangeNotHeld, match="holds sequences up to 20, short of 29"):
        run(_chunks(url, "E", 11, 30, direct=direct, chunk_messages=4))


async def _each(
    reader: type[DirectReader], url: str, stream: str, seqs: list[int], **kw: str
) -> list[RawMessage]:
    nc = await open_connection(url, name="test-each")
    try:
        return await reader(nc, stream, **kw).each(seqs)
    finally:
        await nc.close()


def test_messages_read_one_by_one_come_back_whole_in_order_and_deleted_ones_are_left_out(
    nats_server: NatsCluster,
) -> None:
    """Copies far apart are read by a direct get each, all asked at once: each message is
    handed back in the order asked, as stored (replies are matched by their reply subject,
    whichever replica sends them and whenever)."""
    url = nats_server.url
    run(create_stream(url, "S", ["s.>"]))
    run(publish_raw(url, [(f"s.{i}", b"%d" % i * (i % 50), [("I", str(i))]) for i in range(1, 3001)]))
    run(delete_messages(url, "S", [24, 2400]))
    asked = list(range(12, 3001, 12))  # one in twelve, as a fleet's steady state copies
    got = run(_each(DirectReader, url, "S", asked))
    assert [m.seq for m in got] == [s for s in asked if s not in (24, 2400)]
    assert all((m.subject, m.data, m.headers) == (f"s.{m.seq}", b"%d" % m.seq * (m.seq % 50), [("I", str(m.seq))])
               for m in got)  # fmt: skip
    # With a filter, a sequence holding a message on another subject is gone as well.
    filtered = run(_each(DirectReader, url, "S", [12, 13, 14], filter_subject="s.13"))
    assert [m.seq for m in filtered] == [13]


def test_messages_read_one_by_one_from_an_r3_stream_come_back_whole_through_each_server(
    source_cluster: NatsCluster,
) -> None:
    """On a 3-server cluster any replica answers a direct get, and one a little behind the
    leader answers 404: read at once after the publish, through each server, nothing is missing."""
    run(create_stream(source_cluster.url, "R3", ["r3.>"], num_replicas=3))
    for k, server in enumerate(source_cluster.servers):
        run(
            publish_raw(
                server.url, [(f"r3.{i}", b"%d" % i, []) for i in range(2000 * k + 1, 2000 * k + 2001)]
            )
        )
        asked = list(range(2000 * k + 7, 2000 * k + 2001, 12))
        got = run(_each(DirectReader, server.url, "R3", asked))
        assert [(m.seq, m.subject, m.data) for m in got] == [(s, f"r3.{s}", b"%d" % s) for s in asked], (
            server.url
        )


class _ReplicaWithNothing(DirectReader):
    """Every single direct get answered by a replica that holds none of it (behind its leader,
    or just restarted): its gets go to an empty stream, which answers each with a 404."""

    def direct_get_subject(self) -> str:
        return "$JS.API.DIRECT.GET.NOTHING"


def test_what_the_replica_that_answered_lacks_is_read_from_the_leader(nats_server: NatsCluster) -> None:
    url = nats_server.url
    run(create_stream(url, "NOTHING", ["nothing.>"]))
    run(create_stream(url, "F", ["f.>"]))
    run(publish_raw(url, [(f"f.{i}", b"v%d" % i, REPEATED) for i in range(1, 41)]))
    run(delete_messages(url, "F", [20]))
    got = run(_each(_ReplicaWithNothing, url, "F", [5, 20, 30, 40]))
    assert [(m.seq, m.subject, m.data, m.headers) for m in got] == [
        (s, f"f.{s}", b"v%d" % s, REPEATED) for s in (5, 30, 40)
    ]
    # A sequence past what the leader holds is read again later, never taken as gone.
    with pytest.raises(RangeNotHeld, match="holds sequences up to 40, short of 41"):
        run(_each(_ReplicaWithNothing, url, "F", [30, 41]))


def test_misses_arriving_out_of_order_are_read_again_when_the_leader_lacks_the_highest(
    nats_server: NatsCluster,
) -> None:
    """Misses come back in whatever order the replicas answer. A leader holding up to 700 (just
    elected, still applying its log) lacks 1000: the read is tried again, even when the miss
    at 500 (deleted) came after it."""
    url = nats_server.url
    run(create_stream(url, "O", ["o.>"]))
    run(publish_raw(url, [(f"o.{i}", b"x", []) for i in range(700)]))
    run(delete_messages(url, "O", [500]))

    async def from_leader() -> object:
        nc = await open_connection(url)
        try:
            return await DirectReader(nc, "O")._from_leader([1000, 500])
        finally:
            await nc.close()

    with pytest.raises(RangeNotHeld, match="holds sequences up to 700, short of 1000"):
        run(from_leader())


class _ReplicaBehind(DirectReader):
    """Single direct gets answered by a replica that holds the stream's first 150 messages only
    (PART, the same subjects and payloads): what it lacks, the leader gives."""

    def direct_get_subject(self) -> str:
        return "$JS.API.DIRECT.GET.PART"


class _NoneServing(DirectReader):
    """No server answers direct gets (a stream edited without them, or all its replicas
    catching up): each request gets a 503, and the leader gives every message."""

    def direct_get_subject(self) -> str:
        return "$JS.API.DIRECT.GET.NOSUCH"


class _DeposedLeader(DirectReader):
    """No replica serves single direct gets, so the leader is asked for each; its gets are
    answered for BEHIND, which holds the stream's first 20 messages only: a stream leader
    deposed but not stepped down yet (or just elected on a server before 2.11), answering after
    a stream info from the leader that holds the stream."""

    def direct_get_subject(self) -> str:
        return "$JS.API.DIRECT.GET.NOSUCH"

    def leader_get_stream(self) -> str:
        return "BEHIND"


class _DeposedLeaderHoldingNothing(_DeposedLeader):
    """The same leader behind, and every batched get answered by a replica holding nothing, so
    the leader says where a range goes on."""

    async def batch(self, seq: int, n: int) -> list[RawMessage]:
        return []


@pytest.mark.parametrize("one_by_one", [True, False], ids=["one-by-one", "range"])
def test_messages_a_leader_behind_lacks_are_read_again_not_taken_for_gone(
    nats_server: NatsCluster, one_by_one: bool
) -> None:
    """The stream info showed the stream past sequence 30 and the gets, answered by a leader
    behind, lacked it: it was taken for deleted (one by one), or the range taken to end there,
    and never copied (docs/faults.md listed this as a known gap). Only a reply that shows a
    message gone may leave it out."""
    url = nats_server.url
    run(create_stream(url, "F", ["f.>"]))
    run(create_stream(url, "BEHIND", ["behind.>"]))
    run(publish_raw(url, [(f"f.{i}", b"v%d" % i, []) for i in range(1, 41)]))
    run(publish_raw(url, [(f"behind.{i}", b"v%d" % i, []) for i in range(1, 21)]))

    async def read() -> list[int]:
        nc = await open_connection(url)
        try:
            if one_by_one:
                return [m.seq for m in await _DeposedLeader(nc, "F", prove_gone=True).each([5, 30])]
            reader = _DeposedLeaderHoldingNothing(nc, "F", prove_gone=True)
            return [m.seq async for c in reader.chunks(18, 41) for m in c]
        finally:
            await nc.close()

    with pytest.raises(RangeNotHeld, match=f"holds nothing at or after sequence {30 if one_by_one else 21}"):
        run(read())


async def _read(url: str, stream: str, how: str, seqs: list[int], prove_gone: bool = True) -> list[int]:
    """The sequences read of `seqs` (ascending) as the source's reads make them (`prove_gone`):
    one by one, as their range through a replica holding nothing (so the leader is asked where
    the range goes on), or as their range through a consumer (a stream without direct gets)."""
    nc = await open_connection(url)
    try:
        if how == "one-by-one":
            return [m.seq for m in await DirectReader(nc, stream, prove_gone=prove_gone).each(seqs)]
        reader = (
            _ReplicaHoldingNothing(nc, stream, prove_gone=prove_gone)
            if how == "range"
            else ConsumerReader(nc, stream, prove_gone=prove_gone)
        )
        return [m.seq async for c in reader.chunks(seqs[0], seqs[-1] + 1) for m in c]
    finally:
        await nc.close()


READS = ["one-by-one", "range", "consumer"]


@pytest.mark.parametrize("how", READS)
def test_the_last_messages_deleted_are_gone_where_a_stream_info_shows_it_else_read_again(
    nats_server: NatsCluster, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Nothing at or after the last messages asked for: they were deleted, and the stream info's
    deleted list shows it. Where that list is too long to ask for, the source's read is made
    again, until a message stored later shows them gone; a read of the target (no proof asked:
    its last messages may be deleted with no later one ever to come) ends there as before."""
    url = nats_server.url
    run(create_stream(url, "T", ["t.>"], allow_direct=how != "consumer"))
    run(publish_raw(url, [(f"t.{i}", b"x", []) for i in range(1, 11)]))
    run(delete_messages(url, "T", [9, 10]))
    assert run(_read(url, "T", how, [8, 9, 10])) == [8]
    monkeypatch.setattr(readers, "DELETED_DETAILS_MAX", 1)
    with pytest.raises(RangeNotHeld, match="holds nothing at or after sequence 9"):
        run(_read(url, "T", how, [8, 9, 10]))
    assert run(_read(url, "T", how, [8, 9, 10], prove_gone=False)) == [8]
    run(publish_raw(url, [("t.11", b"x", [])]))
    assert run(_read(url, "T", how, [8, 9, 10])) == [8]


def test_deleted_messages_of_an_r3_stream_are_left_out_through_each_server(
    source_cluster: NatsCluster,
) -> None:
    """On a 3-server cluster, messages deleted inside the stream and at its end are left out of
    reads one by one and of ranges, through whichever server the reader is connected to."""
    url = source_cluster.url
    run(create_stream(url, "R3D", ["r3d.>"], num_replicas=3))
    run(publish_raw(url, [(f"r3d.{i}", b"%d" % i, []) for i in range(1, 61)]))
    run(delete_messages(url, "R3D", [20, 59, 60]))
    for server in source_cluster.servers:
        # A replica may serve a deleted message for the instant before it applies the delete.
        wait_for(
            lambda u=server.url: run(_read(u, "R3D", "one-by-one", [20, 59, 60])) == [],
            10,
            f"the deletes applied on {server.url}",
        )
        assert run(_read(server.url, "R3D", "one-by-one", [10, 20, 30, 59, 60])) == [10, 30], server.url
        whole = [
            m.seq for c in run(_chunks(server.url, "R3D", 1, 61, direct=True, prove_gone=True)) for m in c
        ]
        assert whole == [s for s in range(1, 59) if s != 20], server.url


@pytest.mark.parametrize("how", READS)
def test_messages_purged_are_gone_by_the_stream_infos_first_sequence(
    nats_server: NatsCluster, how: str
) -> None:
    url = nats_server.url
    run(create_stream(url, "P", ["p.>"], allow_direct=how != "consumer"))
    run(publish_raw(url, [(f"p.{i}", b"x", []) for i in range(1, 41)]))
    run(purge_stream(url, "P"))
    assert run(_read(url, "P", how, [30, 35, 40])) == []


def test_a_chunk_that_replicas_answer_in_part_or_not_at_all_is_read_whole_from_the_leader(
    nats_server: NatsCluster,
) -> None:
    url = nats_server.url
    items = [(f"g.{i}", b"g%d" % i, [("I", str(i))]) for i in range(1, 401)]
    run(create_stream(url, "G", ["g.>"]))
    run(create_stream(url, "PART", ["part.>"]))
    run(publish_raw(url, items))
    run(
        publish_raw(
            url, [(f"part.{i}", data, headers) for i, (_, data, headers) in enumerate(items[:150], 1)]
        )
    )
    asked = list(range(2, 401, 2))  # 125 of them past what PART holds: more than LEADER_GETS at once
    for reader in (_ReplicaBehind, _NoneServing, DirectReader):
        got = run(_each(reader, url, "G", asked))
        assert [m.seq for m in got] == asked, reader.__name__
        assert [(m.data, m.headers) for m in got] == [(b"g%d" % s, [("I", str(s))]) for s in asked], (
            reader.__name__
        )
    # Asked twice, a sequence comes back once.
    assert [m.seq for m in run(_each(DirectReader, url, "G", [5, 5, 9]))] == [5, 9]


def test_the_go_originals_source_initiated_consumer_is_found(nats_server: NatsCluster) -> None:
    """An elected entry warns when a source-initiated Go instance (its durable `SR_<entry>`
    on the source) may take over from it and copy again what ours copied (issue 28, hole 11)."""
    from nats.js.api import ConsumerConfig

    from replicator.nats.jetstream import go_source_initiated_consumer

    url = nats_server.url
    run(create_stream(url, "G", ["g.>"]))

    async def found() -> tuple[str | None, str | None]:
        nc = await open_connection(url)
        try:
            before = await go_source_initiated_consumer(nc, "G", "nodes")
            await nc.jetstream().add_consumer(
                "G", ConsumerConfig(durable_name="SR_nodes", ack_policy="explicit")
            )
            return before, await go_source_initiated_consumer(nc, "G", "nodes")
        finally:
            await nc.close()

    assert run(found()) == (None, "SR_nodes")


@pytest.mark.parametrize("direct", [True, False], ids=["direct-get", "consumer"])
def test_a_slow_link_that_keeps_delivering_is_waited_for(
    nats_server: NatsCluster, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's replies taking longer in all than the reader's timeout, on a link that keeps
    delivering, are read to the end: the timeout is for replies that stop coming (issue 28,
    hole 8: below ~2 MB/s a driver read never finished). Here the timeout is 1.5 s and the
    answer takes ~5 s at 60 KB/s."""
    from harness.faultproxy import FaultProxy
    from replicator.nats import readers

    monkeypatch.setattr(readers, "REQUEST_TIMEOUT_S", 1.5)
    url = nats_server.url
    run(create_stream(url, "SLOW", ["s.>"], allow_direct=direct))
    run(publish_raw(url, [("s.x", b"x" * 1000, []) for _ in range(300)]))
    with FaultProxy(int(url.rsplit(":", 1)[1])) as link:
        link.bandwidth = 60_000
        chunks = run(_chunks(link.url, "SLOW", 1, 301, direct=direct, chunk_messages=300))
    assert [m.seq for c in chunks for m in c] == list(range(1, 301))


def test_a_consumer_read_cancelled_while_its_consumer_is_created_leaves_no_consumer(
    nats_server: NatsCluster,
) -> None:
    """The read is cancelled after the server got the create request and before its answer came
    back (0.5 s each way through the proxy): the consumer must still be deleted, not left until
    its inactive threshold (30 s)."""
    import nats

    from harness.faultproxy import FaultProxy

    url = nats_server.url
    run(create_stream(url, "C", ["c.>"], allow_direct=False))
    run(publish_raw(url, [("c.x", b"1", [])]))

    async def cancelled_read(proxied: str) -> int:
        reader_nc = await open_connection(proxied, name="test-reader")
        watcher = await nats.connect(url)
        try:
            asked = asyncio.Event()

            async def on_create(_: object) -> None:
                asked.set()

            await watcher.subscribe("$JS.API.CONSUMER.CREATE.C.>", cb=on_create)
            await watcher.flush()
            read = asyncio.ensure_future(anext(ConsumerReader(reader_nc, "C").chunks(1, 2)))
            await asyncio.wait_for(asked.wait(), 10)
            read.cancel()
            with pytest.raises(asyncio.CancelledError):
                await read
            info = await watcher.jetstream().stream_info("C")
            return info.state.consumer_count
        finally:
            await watcher.close()
            await reader_nc.close()

    with FaultProxy(int(url.rsplit(":", 1)[1])) as link:
        link.latency = 0.5
        assert run(cancelled_read(link.url)) == 0
