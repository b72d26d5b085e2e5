"""The record of what a sampled entry's failed publishes sent (replicator.spark.unacked): read
back at the next start, and never taken for another stream's."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.spark.unacked import Unacked, UnackedRecord


def test_a_record_reads_back_as_restored(tmp_path: Path) -> None:
    record = UnackedRecord(tmp_path / "unacked.json", source_created_us=7)
    assert record.read() is None
    record.write(Unacked({3, 1, 2}, since_ns=42, held={1: 9}))
    back = record.read()
    assert back == Unacked({1, 2, 3}, since_ns=42, held=None, restored=True)  # held is read again
    record.clear()
    assert record.read() is None


def test_a_record_of_an_earlier_stream_of_the_same_name_is_not_this_ones(tmp_path: Path) -> None:
    UnackedRecord(tmp_path / "unacked.json", source_created_us=7).write(Unacked({1}, since_ns=1))
    assert UnackedRecord(tmp_path / "unacked.json", source_created_us=8).read() is None
    assert UnackedRecord(tmp_path / "unacked.json", source_created_us=0).read() is not None  # cannot tell


def test_an_unreadable_record_names_the_file_and_what_removing_it_costs(tmp_path: Path) -> None:
    (tmp_path / "unacked.json").write_text("{not json")
    with pytest.raises(RuntimeError, match=r"unacked.json is unreadable .* remove it"):
        UnackedRecord(tmp_path / "unacked.json").read()
