"""The ordered sink's bookkeeping, without a server (its publishing is integration's)."""

from __future__ import annotations

import concurrent.futures

import pytest

from replicator.aio import LoopThread
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
