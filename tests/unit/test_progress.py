"""The per-stream progress line: totals, rates since the last line, lag."""

from __future__ import annotations

from replicator.progress import Progress, slow_batch_line, source_lag


def test_the_first_line_gives_totals_and_later_ones_the_rate_since_the_last() -> None:
    p = Progress()
    assert p.line(100.0, 1000, 500, 20) == "1,000 read, 500 copied; lag 20 messages"
    assert p.line(130.0, 31_000, 3_500, 0) == (
        "31,000 read, 3,500 copied in the last 30s (1,000 msg/s read, 100 copied); lag 0 messages"
    )
    assert p.line(160.0, 31_000, 3_500, None).endswith("(0 msg/s read, 0 copied); lag unknown messages")


def test_a_fast_batch_has_no_line() -> None:
    assert slow_batch_line({"batchId": 3, "durationMs": {"triggerExecution": 900}}) is None


def test_a_slow_batch_names_its_slowest_steps_first() -> None:
    progress = {
        "batchId": 7,
        "numInputRows": 4299,
        "durationMs": {
            "triggerExecution": 12_300,
            "addBatch": 10_100,
            "queryPlanning": 1_200,
            "walCommit": 40,
        },
    }
    assert (
        slow_batch_line(progress) == "batch 7 took 12.3 s (addBatch 10.1 s, queryPlanning 1.2 s); 4,299 rows"
    )


def test_lag_counts_what_is_left_to_handle_of_what_the_source_still_holds() -> None:
    assert source_lag(first_seq=1, last_seq=10, floor=4) == 6
    # Sequences 1-7 expired while the entry was down, after it had handled up to 4: 8-10 are left.
    assert source_lag(first_seq=8, last_seq=10, floor=4) == 3
    # Every message expired before the entry started: nothing is left, whatever its floor.
    assert source_lag(first_seq=11, last_seq=10, floor=0) == 0
    assert source_lag(first_seq=11, last_seq=10, floor=10) == 0
    # A floor past the stream's end (a checkpoint's, before a resume reads it) is no lag.
    assert source_lag(first_seq=1, last_seq=10, floor=12) == 0
