"""Which batches the driver reads itself, and the range it reads (the reading is integration's)."""

from __future__ import annotations

import json
from pathlib import Path

from replicator.aio import LoopThread
from replicator.options import ReaderOptions
from replicator.source_reader import SourceReader
from replicator.spark.checkpoint import LocalCheckpoint
from replicator.spark.datasource import NatsJetStreamReader
from replicator.spark.read_lease import batch_read_range, write_lease
from replicator.spark.small_batches import SmallBatchReader, batch_offsets

# What Spark writes for a batch (version, batch metadata, then the source's end offset).
ENTRY = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795556583239,"conf":{}}\n%s'


def _entry(checkpoint: Path, batch_id: int, offset: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text(ENTRY % offset)


def test_a_copy_batch_offset_names_where_the_batch_starts() -> None:
    reader = NatsJetStreamReader(ReaderOptions(url="nats://127.0.0.1:1", stream="REG"))
    reader._info = lambda: type("I", (), {"state": type("S", (), {"last_seq": 1500})()})()  # type: ignore[method-assign]
    offset = reader.latestOffset({"seq": 1001}, reader.getDefaultReadLimit())
    assert offset == {"seq": 1501, "from": 1001}
    assert reader.latestOffset(offset, reader.getDefaultReadLimit()) == offset  # nothing new: no batch


def test_the_range_comes_from_the_batch_entry_in_the_offset_log(tmp_path: Path) -> None:
    ckpt = LocalCheckpoint(tmp_path)
    _entry(tmp_path, 7, '{"seq":3001,"from":2001}')
    assert batch_offsets(ckpt, 7) == (2001, 3001, None)
    _entry(tmp_path, 6, '{"seq":3001,"from":2001,"term":"t1"}')  # planned under a read lease
    assert batch_offsets(ckpt, 6) == (2001, 3001, "t1")
    _entry(tmp_path, 8, '{"seq": 4001}')  # written before offsets named their start
    assert batch_offsets(ckpt, 8) is None
    assert batch_offsets(ckpt, 9) is None  # no entry
    (tmp_path / "offsets" / "10").write_text("garbage")
    assert batch_offsets(ckpt, 10) is None
    _entry(tmp_path, 11, "{not json")
    assert batch_offsets(ckpt, 11) is None


def test_a_leader_reads_after_its_lease_and_a_standby_reads_nothing(tmp_path: Path) -> None:
    lease = str(tmp_path / "leading.json")
    assert batch_read_range("", 10, 20, None) == (10, 20)  # no election
    assert batch_read_range(lease, 10, 20, None) is None  # standing by
    term = write_lease(lease, 14).term
    assert batch_read_range(lease, 10, 20, term) == (15, 20)
    assert batch_read_range(lease, 10, 20, "another term") is None


def test_large_batches_are_left_to_spark_and_a_standby_gets_no_rows(tmp_path: Path) -> None:
    lease = str(tmp_path / "leading.json")
    loop = LoopThread("test-small-batches")
    try:
        o = ReaderOptions(url="nats://127.0.0.1:1", stream="S", lease_file=lease)
        small = SmallBatchReader(
            o, LocalCheckpoint(tmp_path), loop, SourceReader(o, direct=True), max_messages=1000
        )
        _entry(tmp_path, 0, '{"seq":1002,"from":1}')
        assert small(0).num_rows == 0  # type: ignore[union-attr]  # standing by (no lease yet)
        assert small.batches_read == 1 and small.rows == {0: 0}
        term = write_lease(lease, 0).term
        _entry(tmp_path, 0, json.dumps({"seq": 1002, "from": 1, "term": term}))
        assert small(0) is None  # 1,001 messages: Spark's tasks read them
        assert small(1) is None  # not in the log: Spark reads it
        assert small.batches_read == 1
    finally:
        loop.stop()
