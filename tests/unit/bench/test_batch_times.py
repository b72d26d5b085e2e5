from __future__ import annotations

from pathlib import Path

import pytest

from bench.batch_times import main, parse, table
from replicator.spark.sampling import BATCH_TIMES_LINE

STREAM = "CHORIA_REGISTRATION/CHORIA_REGISTRATION"


def _line(
    when: str, batch: int, messages: int, copies: int, spark: float, copying: float, stream: str = STREAM
) -> str:
    message = BATCH_TIMES_LINE % (
        batch,
        messages,
        copies,
        copies,
        spark,
        copying,
        0.01,
        spark + copying + 0.01,
    )
    return f"2026-12-07 10:{when} DEBUG replicator.spark.sink: {stream}: {message}"


def test_the_sampled_sinks_debug_lines_are_summed_by_minute_and_for_the_wave() -> None:
    log = [
        _line("00:00,000", 0, 0, 0, 0.1, 0.0),  # an empty first batch: the minutes start after it
        _line("00:10,000", 1, 6000, 0, 0.6, 0.0),
        "2026-12-07 10:00:11,000 DEBUG replicator.replication: X: batch 1 took 0.9 s (addBatch 0.6 s); 6,000 rows",
        _line("01:20,000", 2, 8000, 5000, 0.8, 0.4),
        _line("01:21,500", 3, 2000, 1000, 0.2, 0.1),
        _line("02:30,000", 4, 0, 0, 0.3, 0.0),  # the clock moving: advisories only, counted too
    ]
    batches = list(parse(log))
    assert [b.batch for b in batches] == [0, 1, 2, 3, 4] and {b.stream for b in batches} == {STREAM}
    rows = table(batches).splitlines()
    # Minute 1 from the first batch that read messages (10:00:10), minute 2 from 10:01:10.
    assert rows[2:] == [
        "| 1 | 1 | 6,000 | 0 | 0 | 0.60 (100) | 0.00 (-) | 0.01 | 0.61 | 9,836 |",
        "| 2 | 2 | 10,000 | 6,000 | 6,000 | 1.00 (100) | 0.50 (83) | 0.02 | 1.52 | 6,579 |",
        "| 3 | 1 | 0 | 0 | 0 | 0.30 (-) | 0.00 (-) | 0.01 | 0.31 | 0 |",
        "| ≥ 3,000 copies | 1 | 8,000 | 5,000 | 5,000 | 0.80 (100) | 0.40 (80) | 0.01 | 1.21 | 6,612 |",
        "| all | 4 | 16,000 | 6,000 | 6,000 | 1.90 (119) | 0.50 (83) | 0.04 | 2.44 | 6,557 |",
    ]
    # Minutes counted from 60 s after the first batch: minute 1 then holds batches 2 and 3.
    assert table(batches, after_s=60).splitlines()[2].startswith("| 1 | 2 | 10,000 |")


def test_a_log_of_several_sampled_entries_is_read_one_entry_at_a_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "r.log"
    log.write_text(
        "\n".join([_line("00:10,000", 1, 6000, 0, 0.6, 0.0), _line("00:11,000", 1, 50, 5, 0.2, 0.1, "A/B")])
    )
    assert main([str(log)]) == 2
    assert "choose one with --stream" in capsys.readouterr().err
    assert main([str(log), "--stream", "A/B"]) == 0
    assert "| all | 1 | 50 | 5 |" in capsys.readouterr().out
    assert main([str(log), "--stream", "C/D"]) == 2
    assert "no batch of C/D" in capsys.readouterr().err


def test_a_log_without_debug_lines_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "r.log"
    log.write_text("2026-12-07 10:00:00,000 INFO replicator.runner: started\n")
    assert main([str(log)]) == 0
    assert "loglevel: debug" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_line_operations_md_shows_is_the_one_summed() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
    shown = [ln.strip() for ln in docs.read_text().splitlines() if "messages," in ln and " spark " in ln]
    assert len(shown) == 1, "docs/operations.md shows one sampled batch's debug line"
    [batch] = parse([f"2026-12-07 10:00:00,000 DEBUG replicator.spark.sink: {shown[0]}"])
    assert (batch.stream, batch.messages, batch.copies, batch.spark_s, batch.all_s) == (
        "ORDERS/dc1",
        5912,
        3410,
        0.612,
        0.921,
    )
