"""The ordered sink's bookkeeping, without a server (its publishing is integration's)."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pyarrow as pa
import pytest

from replicator.aio import LoopThread
from replicator.nats.readers import RawMessage
from replicator.spark.inflight import InflightRecord
from replicator.spark.rows import to_record_batch
from replicator.spark.sink import OrderedSink, SinkSettings


def test_a_publish_still_running_past_a_wait_is_still_waited_for() -> None:
    """A takeover's catch-up gives up waiting for the batch in flight after the ack timeout; the
    next batch must still wait for it, or its in-flight record would be replaced while the
    batch may yet land (found by review, issue 28)."""
    loop = LoopThread("test-sink")
    try:
        sink = OrderedSink(SinkSettings("nats://127.0.0.1:1", "T", "S", "dc1", "cfg", "dc1.cfg.S.1"), loop)
        running: concurrent.futures.Future[None] = concurrent.futures.Future()
        sink._pending = running
        with pytest.raises(TimeoutError):
            sink.wait_published(0.01)
        assert sink._pending is running
        running.set_exception(RuntimeError("refused"))
        with pytest.raises(RuntimeError, match="refused"):
            sink.wait_published(1)
        assert sink._pending is None  # its error is reported once
        sink.wait_published(1)
    finally:
        loop.stop()


def test_the_first_batch_on_a_target_not_yet_looked_at_is_recorded_as_possibly_leaving_gaps(
    tmp_path: Path,
) -> None:
    """Until the sink has read the target's limits it cannot know the target is a single server,
    where a chained copy after a refused one is never stored. A clustered one chains by sequence,
    and a foreign message can line a later copy up after a refused one: should the process die
    before the acks say so, only a record that says "gaps possible" makes the next start look for
    the gap (found by reading the code: the first batch after a start was recorded as chained)."""
    loop = LoopThread("test-sink")
    try:
        sink = OrderedSink(
            SinkSettings("nats://127.0.0.1:1", "T", "S", "dc1", "cfg", "dc1.cfg.S.1", ack_timeout=0.1),
            loop,
            inflight=InflightRecord(tmp_path / "inflight"),
        )
        msgs = [RawMessage(seq, "s.a", 1_700_000_000_000_000_000, None, b"{}") for seq in (1, 2, 3)]
        table = pa.Table.from_batches([to_record_batch("S", msgs)])
        sink.small_batches = lambda batch_id: table
        sink(None, 0)
        left = InflightRecord(tmp_path / "inflight").read()
        assert left is not None and (left.first_seq, left.last_seq) == (1, 3)
        assert left.unchained, "a first batch on a target of unknown replicas was recorded as gapless"
    finally:
        if sink._pending is not None:
            sink._pending.cancel()
        loop.stop()
