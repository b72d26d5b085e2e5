"""A sampled entry's replay of a failed unchained publish after a restart (replicator.spark.unacked):
the sinks of a killed process's successor, as the entry builds them (its floor at the target's
last copy), against real servers, without Spark. The replay must publish the copy refused
below that floor, nothing acknowledged, and nothing twice: not a copy acknowledged and then
removed from the target, not a replayed part's copy when a later part fails (its read from the
source) and the batch is replayed again past the target's duplicate window."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from helpers import copied_source_sequences, create_stream, delete_messages, publish, run, update_stream
from nats.js.api import StreamConfig
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
from replicator.spark.unacked import UnackedRecord

pytestmark = pytest.mark.integration

TARGET = StreamConfig(name="T", subjects=["s.>"], allow_direct=True, duplicate_window=1.0)


def _sinks(src: str, dst: str, loop: LoopThread, record: Path, floor: int) -> SamplingSink:
    """The entry's sinks as a start builds them: the ordered sink's floor at the target's last copy."""
    settings = SinkSettings(dst, "T", "S", "dc1", "cfg", "dc1.cfg.S.1", chain=False)
    return SamplingSink(
        OrderedSink(settings, loop, floor=floor),
        loop,
        SourceReader(ReaderOptions(url=src, stream="S")),
        SamplingParams(inspect_ms=60_000, warn_ms=30_000, stream="S"),
        UnackedRecord(record, "T"),
    )


@pytest.mark.parametrize("restarted", [True, False], ids=["after-a-kill", "same-process"])
def test_a_replay_publishes_the_refused_copy_once_and_nothing_acknowledged_or_replayed_again(
    restarted: bool, source_server: NatsCluster, nats_server: NatsCluster, loop: LoopThread, tmp_path: Path
) -> None:
    """`after-a-kill`: Spark's replay is the next start's, its sinks new. `same-process`: the
    replay is the same sinks' (the query restarted after the failure)."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "S", ["s.>"], allow_msg_ttl=True))
    run(create_stream(dst, "T", ["s.>"], duplicate_window=1.0))
    items: list[tuple[str, bytes, dict[str, str] | None]] = [
        (f"s.n{i}", json.dumps({"sender": f"n{i}"}).encode(), None) for i in range(1, 301)
    ]
    items[5] = ("s.ttl", items[5][1], {"Nats-TTL": "1h"})  # source sequence 6: refused until allowed
    run(publish(src, items))
    stored = {m.seq: m.ts_ns // 1_000_000 for m in run(read_all(src, "S"))}
    # One batch, two parts (runs of copies far apart): 1-10, then 291-300.
    decided = decided_rows([(s, stored[s]) for s in [*range(1, 11), *range(291, 301)]], 300)
    record = tmp_path / "unacked.json"

    with FaultProxy(source_server.servers[0].port) as source_link:
        first = _sinks(source_link.url, dst, loop, record, floor=0)
        try:
            with pytest.raises(PublishError, match="refused source sequence 6"):
                first.publish_decided(decided, 0, time.monotonic())
        finally:
            if restarted:
                first.close()
        # Unchained: 7-10 stored past the refused copy (and, after a kill, the process ends here).
        assert copied_source_sequences(dst, "T") == [1, 2, 3, 4, 5, 7, 8, 9, 10]
        assert json.loads(record.read_text())["floor"] == 5

        # A successor starts at the target's last copy (10). Meanwhile copy 3, acknowledged, was
        # removed from the target, and the target now takes per-message TTLs; past its window.
        run(delete_messages(dst, "T", [3]))
        run(update_stream(dst, dataclasses.replace(TARGET, allow_msg_ttl=True)))  # its window stays 1 s
        time.sleep(3)  # past the duplicate window (its ids are purged on a timer: up to twice it)
        second = _sinks(source_link.url, dst, loop, record, floor=10) if restarted else first
        publish_part = second._publish_copies

        def then_lose_the_source(*args: Any) -> BatchResult:
            result = publish_part(*args)
            source_link.cut()  # part two's read from the source fails: the batch fails after part one
            return result

        try:
            second.resume()
            lose_the_source = mock.patch.object(second, "_publish_copies", then_lose_the_source)
            with lose_the_source, pytest.raises(Exception):  # noqa: B017 (whichever error a lost source gives)
                second.publish_decided(decided, 0, time.monotonic())
            assert copied_source_sequences(dst, "T") == [1, 2, 4, 5, 7, 8, 9, 10, 6]
            source_link.restore()
            time.sleep(3)  # Spark replays the batch past the duplicate window: none of 6-10 goes again
            second.publish_decided(decided, 0, time.monotonic())
        finally:
            second.close()
    got = copied_source_sequences(dst, "T")
    assert sorted(got) == [1, 2, 4, 5, 6, 7, 8, 9, 10, *range(291, 301)], got  # each once; 3 not again
    assert not record.exists()  # gone once the replay went past it
