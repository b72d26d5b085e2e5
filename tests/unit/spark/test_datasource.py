"""The data source's pure parts: batch sizing (admission control) and range splitting."""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicator.options import ReaderOptions, SamplingOptions
from replicator.spark.datasource import (
    CLOCK_TRAIL_MS,
    INFO_AT_LEAST_S,
    BatchRamp,
    NatsJetStreamReader,
    SourceRecreatedError,
    parse_initial_offset,
    split_range,
)
from replicator.spark.read_lease import batch_read_range, read_lease, write_lease


def test_batches_start_small_and_double_with_every_full_batch_up_to_the_cap() -> None:
    ramp = BatchRamp(first=2000, cap=10_000)
    begin, ends = 1, []
    for _ in range(5):
        end = ramp.end(begin, 100_001, 10_000)
        ends.append(end - begin)
        begin = end
    assert ends == [2000, 4000, 8000, 10_000, 10_000]
    assert ramp.end(begin, begin + 300, 10_000) == begin + 300  # caught up: what there is
    # ...and a later backlog is read at full size at once (no shrinking, see BatchRamp).
    assert ramp.end(begin + 300, begin + 100_000, 10_000) == begin + 300 + 10_000


def test_spark_read_limit_and_cap_bound_every_batch() -> None:
    assert BatchRamp(first=5000, cap=1000).end(1, 10_000, 10_000) == 1001
    assert BatchRamp(first=2000, cap=10_000).end(1, 10_000, 500) == 501
    assert BatchRamp(first=2000, cap=10_000).end(7, 7, 10_000) == 7  # nothing new


@given(st.integers(1, 10**9), st.integers(0, 50_000), st.integers(1, 8), st.integers(1, 5000))
def test_split_range_covers_in_order(start: int, n: int, par: int, min_size: int) -> None:
    parts = split_range(start, start + n, par, min_size)
    covered = [(p.start, p.end) for p in parts]
    assert len(parts) <= par
    if n == 0:
        assert parts == []
        return
    assert covered[0][0] == start and covered[-1][1] == start + n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))


def test_a_replayed_first_batch_starts_where_it_first_started() -> None:
    """Spark asks for the first offset again when the first batch is replayed (its commit lost
    to a crash or a full disk). By then the target's copy has moved the start floor; the kept
    offset wins, so a sampled stream's state sees every message it had read."""
    replay = ReaderOptions(url="nats://127.0.0.1:1", stream="REG", min_start_sequence=401,
                           initial_offset='{"seq": 1, "clock": 0}')  # fmt: skip
    assert NatsJetStreamReader(replay).initialOffset() == {"seq": 1, "clock": 0}  # asks no server
    with pytest.raises(RuntimeError, match="remove the checkpoint directory"):
        parse_initial_offset("{not json", "ckpt/sr-initial-offset.json")
    with pytest.raises(RuntimeError, match="is not an offset"):
        parse_initial_offset('{"clock": 0}', "ckpt/sr-initial-offset.json")


def test_a_standby_reads_nothing_until_a_lease_says_where_the_target_ends(tmp_path: Path) -> None:
    lease = str(tmp_path / "leading.json")
    assert read_lease(lease) is None  # standing by
    first = write_lease(lease, 41_999)
    assert read_lease(lease) == first and first.after == 41_999
    second = write_lease(lease, 50_000)  # taken over again, later: replaced whole, a new term
    assert read_lease(lease) == second and second.after == 50_000 and second.term != first.term
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leading.json"]


def test_a_standby_runs_one_batch_that_reads_nothing_then_waits_for_its_lease(tmp_path: Path) -> None:
    """Spark's first batch in a process is slow; a standby runs it while it stands by (one empty
    read task), not after it takes over. It reads nothing, however often Spark replays it."""
    lease = str(tmp_path / "leading.json")
    reader = NatsJetStreamReader(ReaderOptions(url="nats://127.0.0.1:1", stream="REG", lease_file=lease))
    limit = reader.getDefaultReadLimit()
    start = {"seq": 401}
    warm = reader.latestOffset(start, limit)  # asks no server while standing by
    assert warm == {"seq": 401, "warm": 1}
    parts = reader.partitions(start, warm)
    assert [(p.start, p.end) for p in parts] == [(401, 401)]  # type: ignore[attr-defined]
    assert reader.latestOffset(warm, limit) == warm  # then nothing until it leads
    assert reader.partitions(warm, warm) == []
    restarted = NatsJetStreamReader(ReaderOptions(url="nats://127.0.0.1:1", stream="REG", lease_file=lease))
    assert restarted.latestOffset(warm, limit) == {"seq": 401, "warm": 2}  # a new offset, once


def test_a_known_backlog_is_read_without_asking_the_stream_for_each_batch() -> None:
    """Across a long link every request is a round trip: while the stream was last seen more
    than a batch ahead, the next batch is planned from what is known."""
    reader = NatsJetStreamReader(
        ReaderOptions(url="nats://127.0.0.1:1", stream="REG", first_batch_messages=10_000)
    )
    asked: list[int] = []

    def info() -> SimpleNamespace:
        asked.append(1)
        reader._info_at = time.monotonic()
        return SimpleNamespace(state=SimpleNamespace(last_seq=35_000))

    reader._info = info  # type: ignore[method-assign]
    limit = reader.getDefaultReadLimit()
    offsets = [{"seq": 1}]
    while (nxt := reader.latestOffset(offsets[-1], limit)) != offsets[-1]:
        offsets.append(nxt)
    assert [o["seq"] for o in offsets] == [1, 10_001, 20_001, 30_001, 35_001]
    # At the start; within a batch of the end; caught up (nothing new). Not for batches 2, 3.
    assert len(asked) == 3
    assert reader.reportLatestOffset() == {"seq": 35_001} and len(asked) == 3  # what it last found
    # Still behind, but last asked longer ago than INFO_AT_LEAST_S: asked all the same (a
    # stream deleted and created again is found then, not only at the end it knew).
    reader._info_at = time.monotonic() - INFO_AT_LEAST_S - 1
    reader.latestOffset({"seq": 10_001}, limit)
    assert len(asked) == 4


def _reader_of_a_stream_ending_at(last_seq: int, lease: str) -> NatsJetStreamReader:
    reader = NatsJetStreamReader(ReaderOptions(url="nats://127.0.0.1:1", stream="REG", lease_file=lease))
    reader._warmed = True
    reader._info = lambda: SimpleNamespace(state=SimpleNamespace(last_seq=last_seq))  # type: ignore[method-assign]
    return reader


def test_a_range_planned_as_leader_and_read_after_the_lease_ended_is_read_again_after_a_takeover(
    tmp_path: Path,
) -> None:
    """The leader stalls past the election's TTL between planning a batch and reading it (or is
    killed and restarted): the batch reads nothing and Spark commits it. Winning the key back,
    the first batch begins where the target's copy ends, not where the checkpoint stands, so
    that range is read and published after all (issue 28, hole 1)."""
    lease = str(tmp_path / "leading.json")
    reader = _reader_of_a_stream_ending_at(1_017, lease)
    limit = reader.getDefaultReadLimit()
    first_term = write_lease(lease, 1_000)  # leading; the target's copy ends at 1,000
    batch = reader.latestOffset({"seq": 1_001}, limit)
    assert batch == {"seq": 1_018, "from": 1_001, "term": first_term.term}
    assert batch_read_range(lease, 1_001, 1_018, batch["term"]) == (1_001, 1_018)

    Path(lease).unlink()  # the lease ended before the batch was read: it reads nothing
    assert batch_read_range(lease, 1_001, 1_018, batch["term"]) is None
    assert reader.partitions({"seq": 1_001}, batch) == []
    second_term = write_lease(lease, 1_000)  # won back; the target still ends at 1,000
    assert batch_read_range(lease, 1_001, 1_018, batch["term"]) is None  # nor under the new term
    # Spark committed the empty batch; the next one begins after the target's copy again.
    again = reader.latestOffset(batch, limit)
    assert again == {"seq": 1_018, "from": 1_001, "term": second_term.term}
    parts = reader.partitions(batch, again)
    assert [(p.start, p.end) for p in parts] == [(1_001, 1_018)]  # type: ignore[attr-defined]
    # Later batches of the term continue where the last one ended.
    reader._info = lambda: SimpleNamespace(state=SimpleNamespace(last_seq=1_030))  # type: ignore[method-assign]
    assert reader.latestOffset(again, limit) == {"seq": 1_031, "from": 1_018, "term": second_term.term}


def test_a_takeover_skips_what_another_leader_copied_meanwhile(tmp_path: Path) -> None:
    lease = str(tmp_path / "leading.json")
    reader = _reader_of_a_stream_ending_at(5_000, lease)
    term = write_lease(lease, 4_200)  # the other instance copied up to 4,200
    nxt = reader.latestOffset(
        {"seq": 1_001, "from": 900, "term": "an old term"}, reader.getDefaultReadLimit()
    )
    assert nxt == {"seq": 5_001, "from": 4_201, "term": term.term}


def test_a_takeover_never_begins_before_the_configured_start(tmp_path: Path) -> None:
    """A new pair with start_at_end (or start_time, start_sequence) and an empty target: the
    first takeover finds no copy (after 0), and its first batch begins at the query's first
    offset, not at sequence 1."""
    lease = str(tmp_path / "leading.json")
    reader = NatsJetStreamReader(
        ReaderOptions(url="nats://127.0.0.1:1", stream="REG", lease_file=lease, initial_offset='{"seq": 900}')
    )
    reader._warmed = True
    reader._info = lambda: SimpleNamespace(state=SimpleNamespace(last_seq=1_000))  # type: ignore[method-assign]
    term = write_lease(lease, 0)
    assert reader.latestOffset({"seq": 900}, reader.getDefaultReadLimit()) == {
        "seq": 1_001,
        "from": 900,
        "term": term.term,
    }


def test_where_the_takeover_did_not_find_the_targets_copy_reading_continues_from_the_checkpoint(
    tmp_path: Path,
) -> None:
    """A target with other writers, the entry's last copy deeper than the scan: not found is
    not "the target holds nothing" (that would copy everything again, past the duplicate
    window); the checkpoint decides, as before."""
    lease = str(tmp_path / "leading.json")
    reader = _reader_of_a_stream_ending_at(5_000, lease)
    term = write_lease(lease, None)
    assert read_lease(lease) == term and term.after is None
    nxt = reader.latestOffset({"seq": 4_001, "from": 3_001, "term": "old"}, reader.getDefaultReadLimit())
    assert nxt == {"seq": 5_001, "from": 4_001, "term": term.term}
    assert batch_read_range(lease, 4_001, 5_001, term.term) == (4_001, 5_001)


def test_a_caught_up_clock_is_the_time_the_stream_was_read_by_its_own_clock() -> None:
    """A message stored after the stream was read is not in the batch; the clock must not pass
    its time, or a sender whose gap was just under warn_duration is advised timeout, then
    recover (found by the fault campaign). The stream's leader says when it read the stream."""
    reader = NatsJetStreamReader(
        ReaderOptions(
            url="nats://127.0.0.1:1", stream="REG", sampling=SamplingOptions(inspect_field="sender")
        )
    )
    read_at = int(time.time() * 1000) - 4_000  # the server's clock, behind this host's

    def info() -> SimpleNamespace:
        reader._stream_time_ms = read_at
        return SimpleNamespace(state=SimpleNamespace(last_seq=100))

    reader._info = info  # type: ignore[method-assign]
    offset = reader.latestOffset({"seq": 101, "clock": read_at - 10_000}, reader.getDefaultReadLimit())
    # Less a trail: a clustered stream's leader stamps a message before it counts it.
    assert offset == {"seq": 101, "clock": read_at - CLOCK_TRAIL_MS}


def _caught_up_reader_whose_stream_counts_late(counts_after: int) -> tuple[NatsJetStreamReader, list[int]]:
    """A reader caught up at sequence 1 whose bell has rung, while the stream counts the message
    that rang it only from its `counts_after`-th ask on (a clustered stream counts a message
    once its replicas agreed)."""
    reader = NatsJetStreamReader(ReaderOptions(url="nats://127.0.0.1:1", stream="REG"))
    asked: list[int] = []

    def info() -> SimpleNamespace:
        asked.append(1)
        return SimpleNamespace(state=SimpleNamespace(last_seq=1 if len(asked) < counts_after else 2))

    reader._info = info  # type: ignore[method-assign]
    reader._news_after_waiting = lambda wait_s: "rang"  # type: ignore[method-assign,assignment,return-value]
    return reader, asked


def test_after_a_ring_the_plan_asks_again_until_the_stream_counts_the_message() -> None:
    reader, asked = _caught_up_reader_whose_stream_counts_late(counts_after=5)
    assert reader.latestOffset({"seq": 2}, reader.getDefaultReadLimit()) == {"seq": 3, "from": 2}
    assert len(asked) == 5


def test_after_a_ring_that_brings_nothing_the_plan_gives_up_within_the_settle_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A publish the stream refused rings too: the plan backs off and then says nothing new."""
    from replicator.spark import datasource

    monkeypatch.setattr(datasource, "RING_SETTLE_S", 0.05)
    reader, asked = _caught_up_reader_whose_stream_counts_late(counts_after=10**9)
    began = time.monotonic()
    start = {"seq": 2}
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) is start
    assert time.monotonic() - began < 1.0
    # 2, 4, 8, 16 ms and what is left of the 50: a handful of asks, not one every 2 ms.
    assert 3 <= len(asked) <= 8, len(asked)


def test_after_a_ring_a_stop_ends_the_plan_at_once(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    reader, asked = _caught_up_reader_whose_stream_counts_late(counts_after=10**9)
    reader.o = ReaderOptions(url="nats://127.0.0.1:1", stream="REG", stop_file=str(stop))
    real_info = reader._info

    def info_then_stop() -> SimpleNamespace:
        stop.write_text("")  # a stop arrives while the plan waits for the count
        return real_info()

    reader._info = info_then_stop  # type: ignore[method-assign]
    start = {"seq": 2}
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) is start
    assert len(asked) == 2  # both the first plan's: the plan after the ring stopped before asking


def test_a_plan_on_a_stream_created_again_fails_the_query_in_one_line() -> None:
    """The stream was deleted and created again while the query read it: planning on from the
    old offset would skip the new stream's first messages."""
    from datetime import UTC, datetime

    def info(us: int) -> SimpleNamespace:
        return SimpleNamespace(created=datetime.fromtimestamp(us / 1e6, UTC))

    started = 1_700_000_000_123_456
    reader = NatsJetStreamReader(
        ReaderOptions(url="nats://127.0.0.1:1", stream="REG", source_created_us=started)
    )
    reader._check_same_stream(info(started))  # the same stream
    with pytest.raises(SourceRecreatedError) as e:
        reader._check_same_stream(info(started + 1_500_000))
    assert "stream REG on nats://127.0.0.1:1 was deleted and created again" in str(e.value)
    assert "remove the entry's checkpoint" in str(e.value) and "\n" not in str(e.value)
    assert '{"source_created_us": 1700000001623456}' in str(e.value)  # a restored stream's way out
    unchecked = NatsJetStreamReader(ReaderOptions(url="nats://127.0.0.1:1", stream="REG"))
    unchecked._check_same_stream(info(started + 1_500_000))  # no creation given: not checked
    options = ReaderOptions(url="u", stream="REG", source_created_us=started)
    assert ReaderOptions.from_spark(options.to_spark()).source_created_us == started


def test_a_configured_start_beyond_the_streams_end_waits_without_calling_the_stream_recreated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """start_sequence 2,300 on a stream ending at 2,140: the query waits for 2,300, which is no
    sign of a stream created again; a query that read up to 2,299 and finds the stream at 2,140
    is one (logged once)."""
    waiting = NatsJetStreamReader(
        ReaderOptions(url="nats://127.0.0.1:1", stream="REG", initial_offset='{"seq": 2300}')
    )
    waiting._info = lambda: SimpleNamespace(state=SimpleNamespace(last_seq=2_140))  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        assert waiting.latestOffset({"seq": 2_300}, waiting.getDefaultReadLimit()) == {"seq": 2_300}
    assert "recreated" not in caplog.text
    read_on = NatsJetStreamReader(
        ReaderOptions(url="nats://127.0.0.1:1", stream="REG", initial_offset='{"seq": 1}')
    )
    read_on._info = waiting._info  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        read_on.latestOffset({"seq": 2_300}, read_on.getDefaultReadLimit())
        read_on.latestOffset({"seq": 2_300}, read_on.getDefaultReadLimit())
    assert caplog.text.count("already read up to 2299: the stream was recreated") == 1
