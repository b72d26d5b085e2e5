"""What a sampled entry's failed publishes sent (replicator.spark.unacked): which copies a replay
must check against the target, what an acknowledgement or a replayed part settles, and the
record on disk that a restart or a takeover reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replicator.aio import LoopThread
from replicator.options import ReaderOptions
from replicator.sampling.rules import SamplingParams
from replicator.source_reader import SourceReader
from replicator.spark.sampling import SamplingSink
from replicator.spark.sink import OrderedSink, SinkSettings
from replicator.spark.unacked import Unacked, UnackedRecord, first_failure


def test_a_failure_names_what_it_sent_above_the_acknowledged_prefix() -> None:
    u = first_failure({1, 2, 3, 4, 5}, sink_floor=2, started_ns=10)  # 1-2 acknowledged, 3 refused
    assert u == Unacked({3, 4, 5}, since_ns=10, floor=2)
    assert first_failure({1, 2}, sink_floor=2, started_ns=10) is None  # all acknowledged


def test_a_second_failure_keeps_the_first_ones_copies_and_its_start() -> None:
    u = Unacked({3, 4, 5}, since_ns=10, floor=2)
    # The replay published 3 (acknowledged: the sink's floor moved), then failed at 4; a later
    # part, 6-8, had failed before any ack.
    again = u.after_failure({3, 4, 5, 6, 7, 8}, sink_floor=3, started_ns=20)
    assert again == Unacked({4, 5, 6, 7, 8}, since_ns=10, floor=3)
    assert again is not None and again.held is None  # what the target holds is read again


def test_a_floor_moved_by_a_takeover_vouches_for_nothing_the_record_names() -> None:
    """After a takeover the sink's floor is the target's last copy (8): copy 4, refused below
    it, stays named; only a copy not in the record and at or below that floor is left out."""
    u = Unacked({4, 5, 6}, since_ns=10, floor=3, sink_floor_vouches=False)
    again = u.after_failure({4, 5, 6, 7, 8, 9, 10}, sink_floor=8, started_ns=20)
    assert again == Unacked({4, 5, 6, 9, 10}, since_ns=10, floor=3, sink_floor_vouches=False)


def test_a_replayed_part_settles_what_the_record_names_up_to_its_end() -> None:
    u = Unacked({3, 4, 9, 12}, since_ns=10, floor=2, sink_floor_vouches=False)
    assert u.settled_up_to(2) is u
    rest = u.settled_up_to(9)
    assert rest == Unacked({12}, since_ns=10, floor=9, sink_floor_vouches=False)
    assert u.settled_up_to(12) is None


def test_two_records_merged_vouch_only_as_far_as_both_do() -> None:
    mine = Unacked({5, 6}, since_ns=20, floor=4)
    theirs = Unacked({3, 7}, since_ns=10, floor=2, sink_floor_vouches=False)
    assert mine.merged(theirs) == Unacked({3, 5, 6, 7}, since_ns=10, floor=2, sink_floor_vouches=False)
    same = Unacked({5, 6}, since_ns=20, floor=4, sink_floor_vouches=False)  # as read back from disk
    assert mine.merged(same) is mine  # this process's own record: its floor still vouches


def test_a_record_reads_back_with_its_floor_and_a_floor_that_no_longer_vouches(tmp_path: Path) -> None:
    record = UnackedRecord(tmp_path / "unacked.json", "T", source_created_us=7)
    assert record.read().unacked is None
    record.write(Unacked({3, 1, 2}, since_ns=42, floor=0, held={1: 9}))
    back = record.read().unacked
    assert back == Unacked({1, 2, 3}, since_ns=42, floor=0, sink_floor_vouches=False)
    assert back is not None and back.held is None  # read again from the target
    record.clear()
    assert not record.path.exists()


def test_a_record_of_another_stream_or_target_is_dropped_with_the_reason(tmp_path: Path) -> None:
    UnackedRecord(tmp_path / "unacked.json", "T", source_created_us=7).write(Unacked({1}, since_ns=1))
    found = UnackedRecord(tmp_path / "unacked.json", "T", source_created_us=8).read()
    assert found.unacked is None and "earlier source stream" in found.dropped
    found = UnackedRecord(tmp_path / "unacked.json", "OTHER", source_created_us=7).read()
    assert found.unacked is None and "target stream T, not OTHER" in found.dropped
    assert UnackedRecord(tmp_path / "unacked.json", "T", source_created_us=0).read().unacked is not None


def test_a_record_another_instance_wrote_since_is_not_removed(tmp_path: Path) -> None:
    """Two instances sharing state_store: the one that read the record (or wrote it) removes it
    only if it is still the record it knew, not one the other wrote since."""
    mine = UnackedRecord(tmp_path / "unacked.json", "T")
    mine.write(Unacked({1}, since_ns=1))
    UnackedRecord(tmp_path / "unacked.json", "T").write(Unacked({1, 2}, since_ns=1))
    mine.clear()
    assert json.loads(mine.path.read_text())["seqs"] == [1, 2]
    never_read = UnackedRecord(tmp_path / "unacked.json", "T")
    never_read.clear()
    assert mine.path.exists()
    assert never_read.read().unacked is not None
    never_read.clear()
    assert not mine.path.exists()


def test_an_unreadable_record_names_the_file_and_what_removing_it_costs(tmp_path: Path) -> None:
    (tmp_path / "unacked.json").write_text("{not json")
    with pytest.raises(RuntimeError, match=r"unacked.json is unreadable .* remove it"):
        UnackedRecord(tmp_path / "unacked.json", "T").read()


def test_a_deposed_leader_neither_removes_nor_replaces_the_record_its_successor_read(tmp_path: Path) -> None:
    """Instances sharing state_store: the leader whose lease ran out mid-batch goes on to the
    batch's end, where it would remove the record (or, failing, write its own) that the new
    leader read and relies on after a kill -9 of its own."""
    loop = LoopThread()
    try:
        url = "nats://127.0.0.1:1"  # never connected to: nothing here publishes
        ordered = OrderedSink(SinkSettings(url, "T", "S", "dc1", "cfg", "id", chain=False), loop)
        record = UnackedRecord(tmp_path / "unacked.json", "T")
        sink = SamplingSink(
            ordered,
            loop,
            SourceReader(ReaderOptions(url=url, stream="S")),
            SamplingParams(60_000, 30_000, stream="S"),
            record,
        )
        sink._keep(Unacked({6, 7}, since_ns=1, floor=5))  # its failed publish, recorded while it led
        assert record.path.exists()
        ordered.may_publish = lambda: False  # the lease is gone; a successor read the record
        sink._keep(None)  # its batch's end
        sink._keep(Unacked({6, 7, 8}, since_ns=1, floor=5))  # or another failure
        assert json.loads(record.path.read_text())["seqs"] == [6, 7]
        ordered.may_publish = lambda: True  # leading again: its own record is its to settle
        sink._keep(None)
        assert not record.path.exists()
    finally:
        loop.stop()
