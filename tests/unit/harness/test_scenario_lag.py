"""The lag in seconds a scenario checks: how long ago the oldest unprocessed source message was
stored, from once-a-second samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.scenario.lag import reached_at, trailing_seconds, worst_by_minute
from harness.scenario.runner import HopObservation, Observation, evaluate
from harness.scenario.spec import load_spec
from harness.scenario.truth import Truth

# A source storing 100 messages a second from t=0.
SOURCE = [(float(t), 100.0 * t) for t in range(0, 200)]


def test_when_the_source_reached_a_sequence_is_interpolated_between_its_samples() -> None:
    assert reached_at(SOURCE, 250) == pytest.approx(2.5)
    assert reached_at(SOURCE, 0) == 0.0
    assert reached_at(SOURCE, 10**9) is None  # not stored within the samples


def test_a_replicator_two_seconds_of_publishing_behind_trails_by_two_seconds() -> None:
    processed = [(float(t), max(0.0, 100.0 * (t - 2))) for t in range(10, 20)]
    got = trailing_seconds(SOURCE, processed)
    # Sequence 100*(t-2) processed at t: the next one, 100*(t-2)+1, was stored at t-2+0.01.
    assert all(v == pytest.approx(1.99) for _, v in got), got


def test_a_replicator_that_processed_everything_stored_trails_by_nothing() -> None:
    assert trailing_seconds(SOURCE, [(5.0, 500.0), (6.0, 600.0)]) == [(5.0, 0.0), (6.0, 0.0)]


def test_the_worst_of_each_minute_after_the_settling_start() -> None:
    points = [(35.0, 9.0), (40.0, 1.0), (90.0, 1.5), (100.0, 0.5), (160.0, 2.5), (250.0, 7.0)]
    # From 36 s to 200 s: minutes [36, 96), [96, 156), [156, 200].
    assert worst_by_minute(points, 36.0, 200.0) == [1.5, 0.5, 2.5]


def test_a_scenario_fails_when_the_copy_trails_by_more_than_its_bound_in_any_minute(tmp_path: Path) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text(
        "name: plain\nseed: 1\nspeedup: 100\nduration: 10m\nfleet: {nodes: 10, data_centres: [dc1]}\n"
        "expect: {max_lag_seconds: 2}\n"
    )
    spec = load_spec(path)

    def run(by_minute: list[float]) -> bool:
        truth = Truth(copied=[1], advisories=[], published=1, final_clock_ms=0)
        hop = HopObservation("h", truth, [1], [], 0, 0, 1.0, lag_seconds_by_minute=by_minute)
        report = evaluate(spec, Observation([hop], published=1, publish_seconds=1, publish_rate=1))
        (check,) = [c for c in report.checks if c.name.startswith("lag (s)")]
        assert check.name == "lag (s) in every minute after the first 35 s"
        return check.ok

    assert run([1.2, 2.0, 0.4])
    assert not run([1.2, 2.1, 0.4])
    assert not run([])  # no samples proves nothing
