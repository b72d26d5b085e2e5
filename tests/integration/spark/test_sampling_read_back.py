"""A sampled batch's copies are read back from the source by sequence after the rules decided
on them (their rows carry no payloads). If the source stream was deleted and created again in
between, those sequences hold the new stream's messages: they must not be published as copies
of the ones the rules saw. The rules' rows against real servers, without Spark."""

from __future__ import annotations

import time
from collections.abc import Iterator

import nats
import pyarrow as pa
import pytest
from helpers import create_stream, publish, run
from nats_servers import NatsCluster

from harness.streams import count_messages, read_all
from replicator.aio import LoopThread
from replicator.nats.publisher import PublishError
from replicator.options import ReaderOptions
from replicator.sampling.rules import SamplingParams
from replicator.source_reader import SourceReader
from replicator.spark.sampling import KIND_COPY, KIND_STATS, SamplingSink
from replicator.spark.sink import OrderedSink, SinkSettings

pytestmark = pytest.mark.integration

# The columns of the rules' rows the sink reads (replicator.spark.sampling.OUTPUT_SCHEMA).
ROWS = pa.schema(
    [("kind", pa.string()), ("seq", pa.int64()), ("ts_ms", pa.int64()), ("event", pa.string()),
     ("subject", pa.string()), ("event_id", pa.string()), ("data", pa.binary()), ("size", pa.int64()),
     ("warned", pa.int32()), ("unkeyed", pa.int32()), ("forced", pa.int32()), ("received", pa.int32()),
     ("received_bytes", pa.int64()), ("due_ms", pa.int64())]
)  # fmt: skip


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.stop()


def _decided(copies: list[tuple[int, int]], last_seq: int) -> pa.Table:
    """The rows of one batch: a copy row per (sequence, time in ms), and one bucket's stats."""
    rows = [{"kind": KIND_COPY, "seq": seq, "ts_ms": ts_ms, "size": 100} for seq, ts_ms in copies]
    rows.append({"kind": KIND_STATS, "seq": last_seq, "ts_ms": copies[-1][1], "size": len(copies),
                 "warned": 0, "unkeyed": 0, "forced": 0, "received": last_seq, "received_bytes": 10_000})  # fmt: skip
    return pa.Table.from_pylist(rows, ROWS)


def test_copies_read_back_from_a_recreated_source_are_not_published(
    source_server: NatsCluster, nats_server: NatsCluster, loop: LoopThread
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"]))
    run(create_stream(dst, "REG", ["reg.>"]))
    run(publish(src, [(f"reg.n{i}", b'{"sender": "old"}', None) for i in range(10)]))
    # The rules decided on the stream as it was: copy 2, 5 and 9.
    decided = _decided(
        [(m.seq, m.ts_ns // 1_000_000) for m in run(read_all(src, "REG")) if m.seq in (2, 5, 9)], 10
    )

    async def recreate() -> None:
        nc = await nats.connect(src)
        try:
            await nc.jetstream().delete_stream("REG")
        finally:
            await nc.close()

    run(recreate())
    time.sleep(0.01)  # the new stream's messages are stored later than the old ones
    run(create_stream(src, "REG", ["reg.>"]))
    run(publish(src, [(f"reg.n{i}", b'{"sender": "new"}', None) for i in range(10)]))

    settings = SinkSettings(dst, "REG", "REG", "dc1", "cfg", "dc1.cfg.REG.1")
    sink = SamplingSink(
        OrderedSink(settings, loop),
        loop,
        SourceReader(ReaderOptions(url=src, stream="REG")),
        SamplingParams(inspect_ms=60_000, warn_ms=30_000, stream="REG"),
    )
    try:
        with pytest.raises(PublishError, match="deleted and created again"):
            sink.publish_decided(decided, 0, time.monotonic())
    finally:
        sink.close()
    assert run(count_messages(dst, "REG")) == 0, [m.data for m in run(read_all(dst, "REG"))]
