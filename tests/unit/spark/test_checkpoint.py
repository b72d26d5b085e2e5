"""What the replicator reads itself from a Spark checkpoint."""

from __future__ import annotations

from pathlib import Path

from replicator.spark.checkpoint import LocalCheckpoint, committed_end


def _batch(root: Path, batch: int, offset: str, committed: bool) -> None:
    (root / "offsets").mkdir(exist_ok=True)
    (root / "commits").mkdir(exist_ok=True)
    (root / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offset}')
    if committed:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_committed_end_is_the_last_committed_batchs_next_sequence(tmp_path: Path) -> None:
    files = LocalCheckpoint(tmp_path)
    assert committed_end(files) is None  # a new query
    _batch(tmp_path, 0, '{"seq":1}', committed=False)
    assert committed_end(files) is None  # planned, not committed
    _batch(tmp_path, 0, '{"seq":1}', committed=True)
    for batch, end in ((1, 501), (2, 1001), (10, 1501)):
        _batch(tmp_path, batch, f'{{"seq":{end},"clock":1700000000000}}', committed=True)
    _batch(tmp_path, 11, '{"seq":2001}', committed=False)  # replayed on the next start
    (tmp_path / "commits" / ".11.0f3c.tmp").write_text("v1")  # half-written when killed
    assert committed_end(files) == 1501  # batch 10, by number, not by name


def test_an_entry_not_in_the_datasources_form_names_no_end(tmp_path: Path) -> None:
    files = LocalCheckpoint(tmp_path)
    _batch(tmp_path, 0, "{not json", committed=True)
    assert committed_end(files) is None
    _batch(tmp_path, 1, '{"seq":"12"}', committed=True)
    assert committed_end(files) is None
    (tmp_path / "commits" / "2").write_text("v1")  # committed, its offsets entry gone
    assert committed_end(files) is None
