"""The file through which the sampling sink tells the planner when the clock next needs to move:
it is trusted only for the batch it was written after, and never left stale."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from replicator.spark.clock_due import ClockDue, read_clock_due, write_clock_due


def test_the_planner_reads_what_the_sink_wrote_after_the_same_batch_only(tmp_path: Path) -> None:
    path = str(tmp_path / "clock-due.json")
    assert read_clock_due(path, 1000) is None  # no file yet: the planner moves the clock every second
    write_clock_due(path, ClockDue(1000, 31_000))
    assert read_clock_due(path, 1000) == ClockDue(1000, 31_000)
    assert read_clock_due(path, 2000) is None  # written after another batch
    write_clock_due(path, ClockDue(2000, None))
    assert read_clock_due(path, 2000) == ClockDue(2000, None)  # nothing will ever fall due
    assert [p.name for p in tmp_path.iterdir()] == ["clock-due.json"]  # no temporary file left


@pytest.mark.parametrize("text", ["", "{", "[]", '{"clock": 1000}', '{"clock": "x", "due": 1}'])
def test_a_damaged_file_is_not_trusted(tmp_path: Path, text: str) -> None:
    path = tmp_path / "clock-due.json"
    path.write_text(text)
    assert read_clock_due(str(path), 1000) is None


def test_a_file_that_cannot_be_written_is_removed_not_left_stale(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "clock-due.json"
    write_clock_due(str(path), ClockDue(1000, 31_000))
    (tmp_path / ".clock-due.json.tmp").mkdir()  # the next write cannot create its temporary file
    with caplog.at_level(logging.WARNING):
        write_clock_due(str(path), ClockDue(2000, 32_000))
    assert not path.exists()
    assert read_clock_due(str(path), 1000) is None
    assert "could not write" in caplog.text and str(path) in caplog.text
