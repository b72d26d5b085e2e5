"""Which missing copies a gap fill leaves out on a target keeping N messages a subject
(replicator.gap_fill.pushed_out_copies), against a real server, without Spark."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from helpers import create_stream, run
from nats_servers import NatsCluster

from harness.streams import read_all
from replicator.aio import LoopThread
from replicator.gap_fill import pushed_out_copies
from replicator.nats.readers import RawMessage
from replicator.spark.rows import to_record_batch
from replicator.spark.sink import OrderedSink, SinkSettings

pytestmark = pytest.mark.integration


def _rows(*messages: tuple[int, str]) -> pa.Table:
    now = time.time_ns()
    raw = [RawMessage(seq, subject, now, None, b"%d" % seq) for seq, subject in messages]
    return pa.Table.from_batches([to_record_batch("REG", raw)])


def test_a_later_copy_stored_after_the_held_copies_were_read_is_counted_once(
    nats_server: NatsCluster, loop: LoopThread
) -> None:
    """Source sequences 2 and 3 on reg.x are missing below the copy of 4, on a target keeping
    two messages a subject. Stored where they belonged, both would still be there, so 2 must
    go again. The copy of 3 lands after the held copies were read (an earlier publish's ack
    came late): it was counted both as a row about to be published and as a message read on
    the target, two later messages on reg.x, and 2 was left out as pushed out: lost."""
    run(create_stream(nats_server.url, "REG", ["reg.>"], max_msgs_per_subject=2))
    sink = OrderedSink(SinkSettings(nats_server.url, "REG", "REG", "dc1", "cfg", "dc1.cfg.REG.1"), loop)
    try:
        sink.publish_unchained(_rows((1, "reg.a"), (4, "reg.a")))  # target sequences 1 and 2
        held = {1: 1, 4: 2}  # what the gap fill read from the target
        sink.publish_unchained(_rows((3, "reg.x")))  # target sequence 3, after that read
        gone = pushed_out_copies(loop, sink, [(2, "reg.x"), (3, "reg.x")], held)
    finally:
        sink.close()
    assert gone == set()
    assert [m.subject for m in run(read_all(nats_server.url, "REG"))] == ["reg.a", "reg.a", "reg.x"]
