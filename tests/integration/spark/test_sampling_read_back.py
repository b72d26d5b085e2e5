"""A sampled batch's copies are read back from the source by sequence after the rules decided
on them (their rows carry no payloads). If the source stream was deleted and created again in
between, those sequences hold the new stream's messages: they must not be published as copies
of the ones the rules saw. The rules' rows against real servers, without Spark."""

from __future__ import annotations

import time

import nats
import pytest
from helpers import create_stream, publish, run
from nats_servers import NatsCluster
from sampled_rows import decided as decided_rows

from harness.streams import count_messages, read_all
from replicator.aio import LoopThread
from replicator.nats.publisher import PublishError
from replicator.options import ReaderOptions
from replicator.sampling.rules import SamplingParams
from replicator.source_reader import SourceReader
from replicator.spark.sampling import SamplingSink
from replicator.spark.sink import OrderedSink, SinkSettings

pytestmark = pytest.mark.integration


def test_copies_read_back_from_a_recreated_source_are_not_published(
    source_server: NatsCluster, nats_server: NatsCluster, loop: LoopThread
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"]))
    run(create_stream(dst, "REG", ["reg.>"]))
    run(publish(src, [(f"reg.n{i}", b'{"sender": "old"}', None) for i in range(10)]))
    # The rules decided on the stream as it was: copy 2, 5 and 9.
    decided = decided_rows(
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
