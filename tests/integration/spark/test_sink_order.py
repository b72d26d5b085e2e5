"""The copy sink against a real target that refuses one message in the middle of a pipelined
batch, for a reason no check before publishing can see (a header the target's stream does not
permit): the target holds exactly the copies before it, in order, and nothing after it; once
the target takes it, the rest follows in order. Without the chain (`chain_copies: false`), the
copies after it land first: what the chain is for. Chained copies ask for an ack only every
256th (replicator.spark.sink): the refused one is found whether it sits before the first ack
or after several."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import SLOW_S, copied_source_sequences, create_stream, run, wait_for
from nats_servers import NatsCluster

from replicator.aio import LoopThread
from replicator.nats.connect import open_connection
from replicator.nats.publisher import PublishError
from replicator.nats.readers import RawMessage
from replicator.spark.inflight import InflightRecord
from replicator.spark.rows import to_record_batch
from replicator.spark.sink import OrderedSink, SinkClosed, SinkSettings


def _batch(n: int, rollup_at: int) -> pa.Table:
    now = time.time_ns()
    msgs = [
        # The rollup is alone on its subject: once allowed, it replaces nothing.
        RawMessage(seq, "t.rollup", now, [("Nats-Rollup", "sub")], b"x")
        if seq == rollup_at
        else RawMessage(seq, f"t.{seq % 5}", now, None, b"x" * 100)
        for seq in range(1, n + 1)
    ]
    return pa.Table.from_batches([to_record_batch("S", msgs)])


def _sink(url: str, loop: LoopThread, stream: str, chain: bool) -> OrderedSink:
    settings = SinkSettings(url, stream, "S", "dc1", "cfg", "dc1.cfg.S.1", chain=chain)
    return OrderedSink(settings, loop)


def _wait_for_leader(url: str, stream: str) -> None:
    """Until the stream answers a publish-ready lookup (a new R3 stream elects its leader first)."""

    async def has_leader() -> bool:
        nc = await open_connection(url)
        try:
            info = await nc.jetstream().stream_info(stream)
            return info.cluster is None or bool(info.cluster.leader)
        except Exception:
            return False
        finally:
            await nc.close()

    wait_for(lambda: run(has_leader()), SLOW_S, f"stream {stream}'s leader")


async def _allow_rollups(url: str, stream: str) -> None:
    nc = await open_connection(url)
    try:
        js = nc.jetstream()
        cfg = (await js.stream_info(stream)).config
        cfg.allow_rollup_hdrs = True
        await js.update_stream(cfg)
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("chain", "n", "rollup_at"),
    [(True, 100, 40), (True, 1000, 700), (False, 100, 40)],
    ids=["chained", "chained-after-three-acks", "unchained"],
)
def test_a_refusal_mid_batch_leaves_no_copy_after_a_gap(
    target_of_each_kind: tuple[NatsCluster, int], loop: LoopThread, chain: bool, n: int, rollup_at: int
) -> None:
    """On an R3 target too (issue 28, hole 6): there, a copy chained by Nats-Expected-Last-Msg-Id
    that the stream refused made every replica fail to apply it ("critical write error") and
    the stream lost its leader for good (nats-server 2.15)."""
    nats_server, replicas = target_of_each_kind
    run(create_stream(nats_server.url, "T", ["t.>"], num_replicas=replicas))  # no rollups allowed
    _wait_for_leader(nats_server.url, "T")
    sink = _sink(nats_server.url, loop, "T", chain)
    try:
        with pytest.raises(PublishError, match=f"refused source sequence {rollup_at}: rollup"):
            sink.publish_table(_batch(n, rollup_at))
        got = copied_source_sequences(nats_server.url, "T")
        if chain:
            assert got == list(range(1, rollup_at))  # nothing after the refused one
            assert sink.floor == rollup_at - 1
            assert sink.landed == rollup_at - 1
        else:
            assert got == [s for s in range(1, n + 1) if s != rollup_at]  # a gap, then the rest
            return
        run(_allow_rollups(nats_server.url, "T"))
        sink.publish_table(_batch(n, rollup_at))  # the same batch again, as Spark replays it
    finally:
        sink.close()
    got = copied_source_sequences(nats_server.url, "T")
    assert got == list(range(1, n + 1)), sorted(set(range(1, n + 1)) - set(got))


def test_batches_refused_again_and_again_leave_no_subscription_behind(
    nats_server: NatsCluster, loop: LoopThread
) -> None:
    """Each failed batch drops its publisher; its acks' inbox goes with it (issue 28, hole 9:
    a sink retrying a refusal for hours gathered one subscription per retry)."""
    run(create_stream(nats_server.url, "T", ["t.>"]))  # no rollups allowed: every try is refused
    sink = _sink(nats_server.url, loop, "T", chain=True)
    try:
        subscriptions = []
        for _ in range(5):
            with pytest.raises(PublishError, match="rollup"):
                sink.publish_table(_batch(20, 10))
            assert sink._nc is not None
            subscriptions.append(len(sink._nc._subs))  # nats-py's request inbox, and no more
        assert subscriptions == [1] * 5
    finally:
        sink.close()


def test_another_writer_in_the_middle_of_batches_costs_no_copy(
    target_of_each_kind: tuple[NatsCluster, int], loop: LoopThread
) -> None:
    """Another writer publishes to the target while batches are copied to it. Every copy lands
    once, none lost (found by review, issue 28: chained by sequence, a refused copy leaves the
    sequence where it was, another writer's message lines the next copy up again, and the
    copies refused in between were lost). On a single server no copy lands after a gap either."""
    nats_server, replicas = target_of_each_kind
    url = nats_server.url
    run(create_stream(url, "T", ["t.>"], num_replicas=replicas))
    _wait_for_leader(url, "T")
    stop = threading.Event()
    sent = [0]  # their messages stored so far

    def other_writer() -> None:
        async def write() -> None:
            nc = await open_connection(url, name="test-other-writer")
            try:
                while not stop.is_set():
                    await nc.request("t.other", b"theirs", timeout=5)
                    sent[0] += 1
                    await asyncio.sleep(0.003)
            finally:
                await nc.close()

        asyncio.run(write())

    def their_next_message(after: int) -> None:
        deadline = time.monotonic() + 30
        while sent[0] <= after and time.monotonic() < deadline:
            time.sleep(0.002)
        assert sent[0] > after, "the other writer stored nothing in 30 s"

    writer = threading.Thread(target=other_writer, daemon=True)
    sink = _sink(url, loop, "T", chain=True)
    writer.start()
    try:
        now = time.time_ns()
        for first in range(1, 4001, 500):
            # At least one of theirs before each batch (so between ours from the second on):
            # what this test is about happens whatever the machine's load; more may land inside
            # a batch.
            their_next_message(sent[0])
            msgs = [
                RawMessage(seq, f"t.{seq % 5}", now, None, b"x" * 100) for seq in range(first, first + 500)
            ]
            sink.publish_table(pa.Table.from_batches([to_record_batch("S", msgs)]))
    finally:
        stop.set()
        writer.join(30)
        sink.close()
    every = copied_source_sequences(url, "T")
    got = [seq for seq in every if seq > 0]  # -1: the other writer's
    assert sorted(got) == list(range(1, 4001)), f"{len(set(range(1, 4001)) - set(got))} copies lost"
    assert -1 in every[every.index(1) :], "none of theirs among our copies: nothing here was tested"
    if replicas == 1:
        assert got == sorted(got)


def test_a_batch_left_in_flight_is_never_replaced_by_the_next_after_a_stop_took_its_error(
    target_of_each_kind: tuple[NatsCluster, int], loop: LoopThread, tmp_path: Path
) -> None:
    """A refused batch's in-flight record is what makes the next start publish it again. Whoever
    waits for the batch takes its error (a stop closing the sink, the live copies); a batch that
    comes after (the copies ahead of the query; the live copies) must not replace that record,
    or the refused copies and every one after them up to that batch are lost for good (found by
    review). Once the sink is closed, nothing is published at all."""
    nats_server, replicas = target_of_each_kind
    run(create_stream(nats_server.url, "T", ["t.>"], num_replicas=replicas))  # no rollups allowed
    _wait_for_leader(nats_server.url, "T")
    record = InflightRecord(tmp_path / "inflight")
    settings = SinkSettings(nats_server.url, "T", "S", "dc1", "cfg", "dc1.cfg.S.1", chain=True)
    sink = OrderedSink(settings, loop, inflight=record)
    try:
        sink.publish_rows(_batch(100, 40), time.monotonic())  # its publish starts; refused at 40
        with pytest.raises(PublishError, match="refused source sequence 40"):
            sink.wait_published(SLOW_S)  # someone else takes the error first
        later = pa.Table.from_batches(
            [
                to_record_batch(
                    "S", [RawMessage(s, "t.1", time.time_ns(), None, b"x") for s in range(101, 201)]
                )
            ]
        )
        # The refusal stays the sink's until catch_up has published its batch again: raised to
        # whoever publishes next (the copies ahead, the live copies, the query's next batch).
        with pytest.raises(PublishError, match="refused source sequence 40"):
            sink.publish_rows(later, time.monotonic())
        # And the record itself is never written over, should that failure be cleared first.
        sink.failure_settled()
        with pytest.raises(RuntimeError, match="source sequences 1-100 are still in flight"):
            sink.publish_rows(later, time.monotonic())
    finally:
        sink.close()
    with pytest.raises(SinkClosed):
        sink.publish_rows(later, time.monotonic())
    left = record.read()
    assert left is not None and (left.first_seq, left.last_seq) == (1, 100)
    assert copied_source_sequences(nats_server.url, "T") == list(range(1, 40))


def test_nothing_is_published_once_the_sink_is_closed(
    target_of_each_kind: tuple[NatsCluster, int], loop: LoopThread, tmp_path: Path
) -> None:
    """A stop closes the sink and then writes how far the target acknowledged its copies (the
    live mark). A copier the stop gave up waiting for (the copies ahead of the query, on a target
    slow to answer) reconnected and published its next chunk after that: copies the mark does
    not cover, which a start that cannot see the target's tail (another writer buried it past
    the duplicate window) would store again. A closed sink publishes nothing."""
    nats_server, replicas = target_of_each_kind
    run(create_stream(nats_server.url, "T", ["t.>"], num_replicas=replicas))
    _wait_for_leader(nats_server.url, "T")
    record = InflightRecord(tmp_path / "inflight")
    settings = SinkSettings(nats_server.url, "T", "S", "dc1", "cfg", "dc1.cfg.S.1", chain=True)
    sink = OrderedSink(settings, loop, inflight=record)
    first = pa.Table.from_batches(
        [to_record_batch("S", [RawMessage(s, "t.1", time.time_ns(), None, b"x") for s in range(1, 101)])]
    )
    later = pa.Table.from_batches(
        [to_record_batch("S", [RawMessage(s, "t.1", time.time_ns(), None, b"x") for s in range(101, 201)])]
    )
    sink.publish_rows(first, time.monotonic())
    sink.close()  # waits for the first batch's acks
    assert sink.floor == 100 and record.read() is None
    with pytest.raises(SinkClosed, match="closed for a stop"):
        sink.publish_rows(later, time.monotonic())
    assert sink.floor == 100 and record.read() is None
    assert copied_source_sequences(nats_server.url, "T") == list(range(1, 101))


def test_the_floor_never_goes_below_acknowledged_copies_while_gaps_are_filled(
    target_of_each_kind: tuple[NatsCluster, int], loop: LoopThread
) -> None:
    """Filling a gap publishes copies below the floor. It lowered the floor to do so, for as long
    as the fill ran: a stop that gave up waiting for the fill, or the live copies, wrote that as
    the mark of what the target acknowledged, and a start that cannot see the target's tail
    (another writer buried it past the duplicate window) stored the copies above it again."""
    nats_server, replicas = target_of_each_kind
    run(create_stream(nats_server.url, "T", ["t.>"], num_replicas=replicas))
    _wait_for_leader(nats_server.url, "T")
    sink = _sink(nats_server.url, loop, "T", chain=False)

    def rows(seqs: range) -> pa.Table:
        now = time.time_ns()
        return pa.Table.from_batches(
            [to_record_batch("S", [RawMessage(s, "t.1", now, None, b"x") for s in seqs])]
        )

    try:
        sink.publish_table(rows(range(1, 101)))
        sink.publish_table(rows(range(1101, 1201)))  # copies 101-1100 missing: a gap below the floor
        assert sink.floor == 1200
        filling, seen = threading.Event(), []

        def watch() -> None:  # as the stop's mark and the live mark read it: from another thread
            while filling.is_set():
                seen.append(sink.floor)
                time.sleep(0.0005)

        filling.set()
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            result = sink.fill_gaps(rows(range(101, 1101)))
        finally:
            filling.clear()
            watcher.join()
        assert result.copied == 1000 and seen and min(seen) == 1200, (min(seen), len(seen))
        assert sink.floor == 1200
    finally:
        sink.close()
    got = copied_source_sequences(nats_server.url, "T")
    assert sorted(got) == list(range(1, 1201)) and len(got) == 1200
