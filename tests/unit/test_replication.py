"""What a kill -9 leaves in a checkpoint, found before the query starts again."""

from __future__ import annotations

from pathlib import Path

from replicator.replication import crash_leftovers


def test_half_written_log_files_are_found_and_nothing_else(tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoint"
    for log in ("offsets", "commits"):
        (ckpt / log).mkdir(parents=True)
    half = ckpt / "offsets" / ".0.7eec4913-4b84-41a4-b66c-f50b7700bd43.tmp"
    half.write_text("v1\n")
    (ckpt / "commits" / ".3.abc.tmp").write_text("")
    crc = ckpt / "offsets" / "..0.7eec4913-4b84-41a4-b66c-f50b7700bd43.tmp.crc"
    crc.write_text("")
    for kept in (
        ckpt / "offsets" / "0",
        ckpt / "offsets" / ".0.crc",
        ckpt / "commits" / "2",
        ckpt / "metadata",
        ckpt / "sr-initial-offset.json",
    ):
        kept.write_text("{}")
    assert crash_leftovers(ckpt) == [ckpt / "commits" / ".3.abc.tmp", crc, half]
    assert crash_leftovers(tmp_path / "none") == []
