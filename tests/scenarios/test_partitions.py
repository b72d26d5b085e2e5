"""The `partitions` scenario in CI: one stream in two leader-elected partitions across two
processes, the leading process killed with kill -9 mid-copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.scenario.runner import run_scenario
from harness.scenario.spec import load_spec

pytestmark = [pytest.mark.integration, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]


def test_partitions_move_to_the_surviving_process_and_each_stays_exact(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "scenarios" / "partitions.yaml")
    report, obs = run_scenario(spec, tmp_path)
    print(report.table())
    assert report.ok, report.table()
    assert [h.label for h in obs.hops] == ["sr_partitions/dc1", "sr_partitions/dc2"]
    # Both partitions together are the whole stream, each copied exactly once.
    assert sum(h.truth.published for h in obs.hops) == obs.published
    assert all(h.copies == h.truth.copied for h in obs.hops)
    log = (tmp_path / "partitions.sr_partitions-1.log").read_text() + (
        tmp_path / "partitions.sr_partitions-0.log"
    ).read_text()
    assert log.count("became the leader") >= 4  # each partition led by one, then by the other
