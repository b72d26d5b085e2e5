"""The in-flight record's rules (replicator.spark.inflight), on files only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replicator.spark.inflight import InflightRecord


def test_a_range_not_cleared_is_never_replaced_and_a_cleared_one_is(tmp_path: Path) -> None:
    record = InflightRecord(tmp_path / "inflight.json", 111)
    record.write(1, 100)
    with pytest.raises(RuntimeError, match="source sequences 1-100 are still in flight"):
        record.write(101, 200)
    left = record.read()
    assert left is not None and (left.first_seq, left.last_seq) == (1, 100)
    record.clear()
    record.write(101, 200)
    left = record.read()
    assert left is not None and (left.first_seq, left.last_seq, left.source_created_us) == (101, 200, 111)


def test_turning_a_range_unchained_keeps_it(tmp_path: Path) -> None:
    record = InflightRecord(tmp_path / "inflight.json", 111)
    record.write(1, 100, unchained=False)
    record.mark_unchained()
    left = record.read()
    assert left is not None and (left.first_seq, left.last_seq, left.unchained) == (1, 100, True)


def test_a_range_of_an_earlier_stream_of_the_same_name_is_told_apart(tmp_path: Path) -> None:
    path = tmp_path / "inflight.json"
    InflightRecord(path, 111).write(1, 100)
    old = InflightRecord(path, 111).read()
    assert old is not None
    assert InflightRecord(path, 222).of_another_stream(old)
    assert not InflightRecord(path, 111).of_another_stream(old)
    assert not InflightRecord(path, 0).of_another_stream(old)  # the server did not say: kept
    # A record of an earlier version, without the stream's creation, is taken as this stream's.
    path.write_text(json.dumps({"first_seq": 1, "last_seq": 100}))
    older = InflightRecord(path, 222).read()
    assert older is not None and not InflightRecord(path, 222).of_another_stream(older)
