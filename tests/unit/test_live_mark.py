"""The live copies' mark (replicator.live_mark): a start keeps to it only for the same source
stream, and a missing or damaged mark lets it skip nothing."""

from __future__ import annotations

from pathlib import Path

from replicator.live_mark import read_live_mark, write_live_mark


def test_a_mark_is_read_back_for_the_stream_it_was_written_for(tmp_path: Path) -> None:
    mark = tmp_path / "live-copied.json"
    write_live_mark(mark, 1_234, 1_700_000_000_000_000)
    assert read_live_mark(mark, 1_700_000_000_000_000) == 1_234
    write_live_mark(mark, 1_300, 1_700_000_000_000_000)  # replaced whole, never appended
    assert read_live_mark(mark, 1_700_000_000_000_000) == 1_300
    assert not list(tmp_path.glob("*.tmp"))


def test_a_mark_of_another_stream_or_none_or_a_damaged_one_skips_nothing(tmp_path: Path) -> None:
    mark = tmp_path / "live-copied.json"
    assert read_live_mark(mark, 1) == 0  # none yet
    write_live_mark(mark, 1_234, 1_700_000_000_000_000)
    assert read_live_mark(mark, 1_800_000_000_000_000) == 0  # the stream was created again
    assert read_live_mark(mark, 0) == 0  # the server does not say when its stream was created
    write_live_mark(mark, 1_234, 0)
    assert read_live_mark(mark, 1_700_000_000_000_000) == 0
    for damaged in ("", "{", '{"seq": "x", "source_created_us": 1}', '{"source_created_us": 1}', "[1]"):
        mark.write_text(damaged)
        assert read_live_mark(mark, 1) == 0, damaged
