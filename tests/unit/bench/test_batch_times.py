from __future__ import annotations

from pathlib import Path

from bench.batch_times import main, parse, table
from replicator.spark.sampling import BATCH_TIMES_LINE


def _line(when: str, batch: int, messages: int, copies: int, spark: float, copying: float) -> str:
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
    return f"2026-12-07 10:{when} DEBUG replicator.replication: CHORIA_REGISTRATION/CHORIA_REGISTRATION: {message}"


def test_the_sampled_sinks_debug_lines_are_summed_by_minute_and_for_the_wave() -> None:
    log = [
        _line("00:00,000", 0, 0, 0, 0.1, 0.0),  # an empty first batch: the minutes start after it
        _line("00:10,000", 1, 6000, 0, 0.6, 0.0),
        "2026-12-07 10:00:11,000 DEBUG replicator.replication: X: batch 1 took 0.9 s (addBatch 0.6 s); 6,000 rows",
        _line("01:20,000", 2, 8000, 5000, 0.8, 0.4),
        _line("01:21,500", 3, 2000, 1000, 0.2, 0.1),
    ]
    batches = list(parse(log))
    assert [b.batch for b in batches] == [0, 1, 2, 3]
    rows = table(batches).splitlines()
    # Minute 1 from the first batch that read messages (10:00:10), minute 2 from 10:01:10.
    assert rows[2].startswith("| 1 | 1 | 6,000 | 0 | 0 | 0.60 (100) | 0.00 (-) |")
    assert rows[3].startswith("| 2 | 2 | 10,000 | 6,000 | 6,000 | 1.00 (100) | 0.50 (83) |")
    assert rows[4].startswith("| ≥ 3,000 copies | 1 | 8,000 | 5,000 | 5,000 | 0.80 (100) | 0.40 (80) |")
    assert rows[5].startswith("| all | 3 | 16,000 |")
    # Minutes counted from 60 s after the first batch: minute 1 then holds batches 2 and 3.
    assert table(batches, after_s=60).splitlines()[2].startswith("| 1 | 2 | 10,000 |")


def test_a_log_without_debug_lines_says_so(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "r.log"
    log.write_text("2026-12-07 10:00:00,000 INFO replicator.runner: started\n")
    assert main([str(log)]) == 0
    assert "loglevel debug" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_line_operations_md_shows_is_the_one_summed() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
    shown = [ln.strip() for ln in docs.read_text().splitlines() if "messages," in ln and " spark " in ln]
    assert len(shown) == 1, "docs/operations.md shows one sampled batch's debug line"
    [batch] = parse([f"2026-12-07 10:00:00,000 DEBUG replicator.spark.sink: {shown[0]}"])
    assert (batch.messages, batch.copies, batch.spark_s, batch.all_s) == (5912, 3410, 0.612, 0.921)
