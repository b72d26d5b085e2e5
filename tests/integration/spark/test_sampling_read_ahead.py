"""A sampled batch's copies are read back from the source a chunk at a time, each chunk read
while the one before is published. Against real servers, without Spark: every copy goes once,
in order, with its own payload, whichever reader the source allows; and a publish that fails
while the next chunk is being read fails the batch with its own error and leaves no reader
(a pull consumer) behind."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from unittest import mock

import nats
import pytest
from helpers import create_stream, delete_messages, our_copies, publish, run, url_port
from nats.js.api import DiscardPolicy
from nats_servers import NatsCluster
from sampled_rows import decided as decided_rows

from harness.faultproxy import FaultProxy
from harness.streams import read_all
from replicator.aio import LoopThread
from replicator.nats.publisher import PublishError
from replicator.options import ReaderOptions
from replicator.sampling.rules import SamplingParams
from replicator.source_reader import SourceReader
from replicator.spark.sampling import SamplingSink
from replicator.spark.sink import BatchResult, OrderedSink, SinkSettings

pytestmark = pytest.mark.integration


def _sink(src: str, dst: str, loop: LoopThread, chunk_messages: int) -> SamplingSink:
    settings = SinkSettings(dst, "REG", "REG", "dc1", "cfg", "dc1.cfg.REG.1")
    return SamplingSink(
        OrderedSink(settings, loop),
        loop,
        SourceReader(ReaderOptions(url=src, stream="REG", chunk_messages=chunk_messages)),
        SamplingParams(inspect_ms=60_000, warn_ms=30_000, stream="REG"),
    )


def _consumers(url: str, stream: str) -> int:
    async def count() -> int:
        nc = await nats.connect(url)
        try:
            return (await nc.jetstream().stream_info(stream)).state.consumer_count
        finally:
            await nc.close()

    return int(run(count()))


@pytest.mark.parametrize("direct", [True, False], ids=["direct-gets", "pull-consumer"])
def test_copies_read_back_in_many_chunks_go_once_each_in_order(
    source_server: NatsCluster, nats_server: NatsCluster, loop: LoopThread, direct: bool
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"], allow_direct=direct))
    run(create_stream(dst, "REG", ["reg.>"]))
    run(publish(src, [(f"reg.n{i}", f'{{"sender": "n{i}", "i": {i}}}'.encode(), None) for i in range(700)]))
    source = {m.seq: m for m in run(read_all(src, "REG"))}
    # Three runs (copies more than 256 apart are read separately), over several chunks of 3: with
    # direct gets the first and last are sparse enough to be read one by one (replicator.copy_reads),
    # 400-407 as a range; with a pull consumer, each as a range.
    wanted = [*range(1, 15), 20, 22, *range(400, 408), 690, 700]
    sink = _sink(src, dst, loop, chunk_messages=3)
    try:
        sink.publish_decided(
            decided_rows([(s, source[s].ts_ns // 1_000_000) for s in wanted], 700), 0, time.monotonic()
        )
    finally:
        sink.close()
    assert our_copies(dst, "REG") == wanted
    copies = run(read_all(dst, "REG"))
    assert [(m.subject, m.data) for m in copies] == [(source[s].subject, source[s].data) for s in wanted]
    assert _consumers(src, "REG") == 0


@pytest.mark.parametrize("direct", [True, False], ids=["direct-gets", "pull-consumer"])
def test_a_later_chunk_unlike_what_the_rules_saw_fails_the_batch_after_the_chunks_before_it(
    source_server: NatsCluster, nats_server: NatsCluster, loop: LoopThread, direct: bool
) -> None:
    """Each chunk read back is checked against the time the rules saw (a stream deleted and
    created again in between): the third chunk's check fails once the first two are published,
    and nothing of it or after it is."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"], allow_direct=direct))
    run(create_stream(dst, "REG", ["reg.>"]))
    run(publish(src, [(f"reg.n{i}", b'{"sender": "n"}', None) for i in range(10)]))
    times = {m.seq: m.ts_ns // 1_000_000 for m in run(read_all(src, "REG"))}
    times[8] -= 1  # as if the rules had decided on another message 8
    sink = _sink(src, dst, loop, chunk_messages=3)
    try:
        with pytest.raises(PublishError, match="sequence 8 now holds a message"):
            sink.publish_decided(decided_rows(sorted(times.items()), 10), 0, time.monotonic())
    finally:
        sink.close()
    assert our_copies(dst, "REG") == [1, 2, 3, 4, 5, 6]
    assert _consumers(src, "REG") == 0


def _reads_left(loop: LoopThread) -> list[str]:
    """The sink's reads ahead still running on the connections' loop."""

    async def reads() -> list[str]:
        return [n for t in asyncio.all_tasks() if "_next_chunk" in (n := t.get_coro().__qualname__)]

    return list(loop.run(reads(), 10))


def _failing_target(dst: str) -> None:
    """The target refuses its fifth message: with chunks of 3, the second chunk's publish fails."""
    run(create_stream(dst, "REG", ["reg.>"], max_msgs=4, discard=DiscardPolicy.NEW))


def test_a_publish_failing_while_the_next_chunk_is_read_leaves_no_reader_behind(
    source_server: NatsCluster, nats_server: NatsCluster, loop: LoopThread
) -> None:
    src, dst = source_server.url, nats_server.url
    # Without direct gets the source is read by a pull consumer, which must not outlive the read.
    run(create_stream(src, "REG", ["reg.>"], allow_direct=False))
    _failing_target(dst)
    run(publish(src, [(f"reg.n{i}", b'{"sender": "n"}', None) for i in range(40)]))
    times = {m.seq: m.ts_ns // 1_000_000 for m in run(read_all(src, "REG"))}
    # Reads across a slow link (0.4 s a round trip): the third chunk's read is still on its way
    # when the second chunk's publish fails, within milliseconds.
    with FaultProxy(url_port(src)) as link:
        link.latency = 0.2
        sink = _sink(link.url, dst, loop, chunk_messages=3)
        try:
            with pytest.raises(PublishError, match="refused source sequence 5"):
                sink.publish_decided(decided_rows(sorted(times.items()), 40), 0, time.monotonic())
        finally:
            sink.close()
    assert our_copies(dst, "REG") == [1, 2, 3, 4]
    assert _consumers(src, "REG") == 0
    assert _reads_left(loop) == []


@pytest.mark.parametrize("every", [1, 2], ids=["read-as-ranges", "read-one-by-one"])
def test_a_read_ahead_stalled_when_the_publish_fails_is_cancelled_not_waited_for(
    source_server: NatsCluster, nats_server: NatsCluster, loop: LoopThread, every: int
) -> None:
    """A source that stops answering (a frozen host) while a chunk is published: a read waits
    up to 30 s for its replies. The batch fails at once with the publish's own error, whether
    the copies are read as a range (every message) or one by one (one in two)."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"]))
    _failing_target(dst)
    run(publish(src, [(f"reg.n{i}", b'{"sender": "n"}', None) for i in range(40)]))
    times = {m.seq: m.ts_ns // 1_000_000 for m in run(read_all(src, "REG")) if m.seq % every == 1 % every}
    copies = sorted(times)
    with FaultProxy(url_port(src)) as link:
        link.latency = 0.2  # the third chunk's read cannot be back before the link stalls
        sink = _sink(link.url, dst, loop, chunk_messages=3)
        publish_part = sink._publish_copies
        parts = []

        def stall_then_publish(*args: Any) -> BatchResult:
            parts.append(1)
            if len(parts) == 2:
                link.stall()
            return publish_part(*args)

        started = time.monotonic()
        try:
            with (
                mock.patch.object(sink, "_publish_copies", stall_then_publish),
                pytest.raises(PublishError, match=f"refused source sequence {copies[4]}"),
            ):
                sink.publish_decided(decided_rows(sorted(times.items()), 40), 0, time.monotonic())
            failed_after = time.monotonic() - started
            assert _reads_left(loop) == []
        finally:
            link.restore()
            sink.close()
    assert failed_after < 10, failed_after  # not the read's own 30 s, nor _closed's 10 s bound
    assert our_copies(dst, "REG") == copies[:4]


def test_copies_far_apart_are_read_one_by_one_and_nothing_between_them_is_read(
    source_server: NatsCluster, nats_server: NatsCluster, loop: LoopThread
) -> None:
    """A fleet's steady state copies one message in twelve: the source sends the copies (and
    the stream's info), not the range around them. A copy deleted from the source since the
    rules saw it is not published; every other goes once, in order, as stored."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"]))
    run(create_stream(dst, "REG", ["reg.>"]))
    run(publish(src, [(f"reg.n{i % 100}", f'{{"i": {i}}}'.encode(), None) for i in range(1200)]))
    source = {m.seq: m for m in run(read_all(src, "REG"))}
    wanted = list(range(12, 1201, 12))
    run(delete_messages(src, "REG", [600]))
    sink = _sink(src, dst, loop, chunk_messages=40)
    try:
        sink.publish_decided(
            decided_rows([(s, source[s].ts_ns // 1_000_000) for s in wanted], 1200), 0, time.monotonic()
        )
        received = loop.run(sink.source.connection(), 10).stats["in_msgs"]
    finally:
        sink.close()
    copied = [s for s in wanted if s != 600]
    assert our_copies(dst, "REG") == copied
    copies = run(read_all(dst, "REG"))
    assert [(m.subject, m.data) for m in copies] == [(source[s].subject, source[s].data) for s in copied]
    assert received <= len(wanted) + 5, received  # a range would have read 1,189 messages
