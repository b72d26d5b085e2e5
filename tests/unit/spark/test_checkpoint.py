"""What the replicator reads itself from a Spark checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.spark.checkpoint import (
    SAMPLING_FILE,
    CheckpointMismatch,
    LocalCheckpoint,
    committed_end,
    keep_sampling_buckets,
    keep_source_identity,
)


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


def test_a_sampled_checkpoint_keeps_its_bucket_count_and_refuses_another(tmp_path: Path) -> None:
    files = LocalCheckpoint(tmp_path)
    assert keep_sampling_buckets(files, 32) is None  # the first start records it
    assert keep_sampling_buckets(files, 8) is None  # no batch committed yet: state is empty
    assert keep_sampling_buckets(files, 32) is None
    _batch(tmp_path, 0, '{"seq": 5, "clock": 1}', committed=True)
    assert keep_sampling_buckets(files, 32) is None
    with pytest.raises(CheckpointMismatch) as e:
        keep_sampling_buckets(files, 8)
    assert str(e.value) == (
        f"sampling_buckets is 8 but the checkpoint {tmp_path} keeps its senders in 32 buckets: "
        "set sampling_buckets: 32 (or remove the checkpoint to sample afresh, every sender advised new)"
    )
    assert "\n" not in str(e.value)


def test_a_checkpoint_with_batches_and_no_record_takes_the_configs_count_and_says_so(tmp_path: Path) -> None:
    files = LocalCheckpoint(tmp_path)
    _batch(tmp_path, 0, '{"seq": 5, "clock": 1}', committed=True)
    warning = keep_sampling_buckets(files, 16)
    assert warning is not None and "taken to be sampling_buckets (16)" in warning
    with pytest.raises(CheckpointMismatch, match="keeps its senders in 16 buckets"):
        keep_sampling_buckets(files, 32)


@pytest.mark.parametrize("text", ["", "{", "[]", '{"sampling_buckets": "32"}', '{"sampling_buckets": 0}'])
def test_a_bucket_record_that_is_not_one_is_named_not_overwritten(tmp_path: Path, text: str) -> None:
    _batch(tmp_path, 0, '{"seq": 5, "clock": 1}', committed=True)
    (tmp_path / SAMPLING_FILE).write_text(text)
    with pytest.raises(CheckpointMismatch, match=f"{SAMPLING_FILE} does not say how many buckets"):
        keep_sampling_buckets(LocalCheckpoint(tmp_path), 32)
    assert (tmp_path / SAMPLING_FILE).read_text() == text


def test_a_checkpoint_keeps_the_source_streams_creation_and_refuses_a_stream_created_again(
    tmp_path: Path,
) -> None:
    """Once the checkpoint holds anything of the stream's (an offset, or the first offset
    chosen: copies made ahead of a query that never committed set it), another creation is
    refused in one line that says what to do."""
    files = LocalCheckpoint(tmp_path)
    keep_source_identity(files, "EVENTS", 0)  # the server did not say: nothing recorded
    assert files.read_text("sr-source.json") is None
    keep_source_identity(files, "EVENTS", 1_700_000_000_000_001)
    # Recorded, but nothing else kept yet: a stream created again since costs nothing.
    keep_source_identity(files, "EVENTS", 1_700_000_000_000_002)
    assert files.read_text("sr-source.json") == '{"source_created_us": 1700000000000002}'
    (tmp_path / "sr-initial-offset.json").write_text('{"seq": 2001}')
    keep_source_identity(files, "EVENTS", 1_700_000_000_000_002)  # the same stream again
    with pytest.raises(CheckpointMismatch) as e:
        keep_source_identity(files, "EVENTS", 1_700_000_000_500_000)
    text = str(e.value)
    assert "\n" not in text and "EVENTS was deleted and created again" in text
    assert "remove the checkpoint to copy it from its start" in text
    assert '{"source_created_us": 1700000000500000}' in text  # a restored stream's way out
    # Written by hand as the line says (an editor's newline and all): taken.
    (tmp_path / "sr-source.json").write_text('{"source_created_us": 1700000000500000}\n')
    keep_source_identity(files, "EVENTS", 1_700_000_000_500_000)
    (tmp_path / "sr-initial-offset.json").unlink()
    _batch(tmp_path, 0, '{"seq": 5}', committed=False)  # an offset planned is enough
    with pytest.raises(CheckpointMismatch):
        keep_source_identity(files, "EVENTS", 1_700_000_000_000_002)
    (tmp_path / "sr-source.json").write_text("{}")
    with pytest.raises(CheckpointMismatch, match="does not say which source stream"):
        keep_source_identity(files, "EVENTS", 1_700_000_000_000_001)


def test_a_checkpoint_made_before_the_record_is_taken_to_be_the_current_streams(tmp_path: Path) -> None:
    files = LocalCheckpoint(tmp_path)
    _batch(tmp_path, 0, '{"seq": 5}', committed=True)
    keep_source_identity(files, "EVENTS", 42)
    assert files.read_text("sr-source.json") == '{"source_created_us": 42}'
