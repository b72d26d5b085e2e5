"""The copy sink against a real target that refuses one message in the middle of a pipelined
batch, for a reason no check before publishing can see (a header the target's stream does not
permit): the target holds exactly the copies before it, in order, and nothing after it; once
the target takes it, the rest follows in order. Without the chain (`chain_copies: false`), the
copies after it land first: what the chain is for. Chained copies ask for an ack only every
256th (replicator.spark.sink): the refused one is found whether it sits before the first ack
or after several."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
from helpers import copied_source_sequences, create_stream, run
from nats_servers import NatsCluster

from replicator.aio import LoopThread
from replicator.nats.connect import open_connection
from replicator.nats.publisher import PublishError
from replicator.nats.readers import RawMessage
from replicator.spark.rows import to_record_batch
from replicator.spark.sink import OrderedSink, SinkSettings


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


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.stop()


def _sink(url: str, loop: LoopThread, stream: str, chain: bool) -> OrderedSink:
    settings = SinkSettings(url, stream, "S", "dc1", "cfg", "dc1.cfg.S.1", chain=chain)
    return OrderedSink(settings, loop)


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
    nats_server: NatsCluster, loop: LoopThread, chain: bool, n: int, rollup_at: int
) -> None:
    run(create_stream(nats_server.url, "T", ["t.>"]))  # no rollups allowed
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
