"""What a kill -9 leaves in a checkpoint, found before the query starts again."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from replicator.aio import LoopThread
from replicator.config import Config
from replicator.entry_files import crash_leftovers
from replicator.replication import StreamReplication
from replicator.spark.checkpoint import LocalCheckpoint


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
    found = crash_leftovers(LocalCheckpoint(ckpt))
    assert found == ["offsets/" + crc.name, "offsets/" + half.name, "commits/.3.abc.tmp"]
    assert crash_leftovers(LocalCheckpoint(tmp_path / "none")) == []


def test_start_at_end_is_the_end_as_the_replicator_starts(tmp_path: Path) -> None:
    """Not where the stream ends when Spark first plans the query, seconds later: what is
    published in between is copied."""
    cfg = Config.model_validate(
        {"name": "dc1", "state_store": str(tmp_path), "streams": [
            {"stream": "END", "source_url": "nats://127.0.0.1:1", "target_url": "nats://127.0.0.1:2",
             "start_at_end": True}]}
    )  # fmt: skip
    r = StreamReplication(cfg, cfg.streams[0], LoopThread("test-start-at-end"))
    try:
        r._end_at_start = 106  # what prepare() found: the source ended at 105
        o = r.reader_options()
        assert (o.start_at_end, o.start_sequence) == (False, 106)
    finally:
        r.loop.stop()


def test_a_missing_copy_belonged_before_the_lowest_placed_copy_of_a_later_source_sequence() -> None:
    from replicator.gap_fill import next_position

    # Source sequence -> target sequence: 3 was retried after 4 and 5 (a fill), 2 is missing.
    after = next_position({1: 10, 3: 14, 4: 11, 5: 12})
    assert after(2) == 11  # 2 belonged before 4's copy, the lowest placed of 3, 4 and 5
    assert after(0) == 10
    assert after(5) is None
    assert next_position({})(1) is None


def test_a_failed_batch_is_owed_until_a_batch_ends(tmp_path: Path) -> None:
    """A sampled entry has no in-flight record: a failed batch's copies (one refused, later ones
    stored) are settled only by this instance's replay of it, so a leader keeps the key until
    a batch ends (replicator.runner steps aside only when nothing is owed)."""
    cfg = Config.model_validate(
        {"name": "dc1", "state_store": str(tmp_path), "streams": [
            {"stream": "REG", "source_url": "nats://127.0.0.1:1", "target_url": "nats://127.0.0.1:2",
             "inspect_field": "sender", "inspect_duration": "1h", "leader_election_name": "a"}]}
    )  # fmt: skip
    r = StreamReplication(cfg, cfg.streams[0], LoopThread("test-owed"))
    try:
        assert not r.owes_copies()
        r.batch_unsettled = True  # what the runner sets when it sees the batch fail
        assert r.owes_copies()
        r.batch_committed()  # the replay's batch ended
        assert not r.owes_copies()
    finally:
        r.loop.stop()


def test_why_the_query_makes_the_copies_is_said_once_not_at_each_start_of_the_query(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """copy_live unset on a source without allow_direct: each start of the query (retries too)
    asks again, and gets the same answer; the log says why once."""
    cfg = Config.model_validate(
        {"name": "dc1", "state_store": str(tmp_path), "streams": [
            {"stream": "PLAIN", "source_url": "nats://127.0.0.1:1", "target_url": "nats://127.0.0.1:2"}]}
    )  # fmt: skip
    r = StreamReplication(cfg, cfg.streams[0], LoopThread("test-not-live"))
    try:
        r.can_copy_ahead = lambda: True  # type: ignore[method-assign]  # a sink with its in-flight record
        r._source_direct, r._source_rings = False, True
        with caplog.at_level(logging.INFO):
            assert [r.can_copy_live("local[2]") for _ in range(3)] == [False, False, False]
        said = [m for m in caplog.messages if "the query's batches make the copies" in m]
        assert len(said) == 1, caplog.messages
        r._source_direct = True
        assert r.can_copy_live("local[2]")
    finally:
        r.loop.stop()
