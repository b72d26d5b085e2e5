"""The fault campaign's short run in CI: one fixed seed's schedule of five faults, each on the
leader (a slow link, frozen past the election's TTL, a target server killed under it, kill -9,
its host cut off from the target cluster) on 3+3 clustered servers with R3 streams, two
elected replicators and a fleet, hosts as network namespaces. `make chaos` runs fifty seeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.chaos.schedule import draw

pytestmark = [pytest.mark.integration, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]
SEED = 293


def test_a_seeded_schedule_of_five_faults_loses_doubles_and_reorders_nothing(tmp_path: Path) -> None:
    kinds = {f.kind for f in draw(SEED, 5)}
    assert {"slow", "stall", "server-kill", "kill9", "cut"} == kinds  # what this seed stages
    done = subprocess.run(
        [sys.executable, "-m", "harness", "chaos", "--seeds", str(SEED), "--faults", "5", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [result] = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert result["ok"] and result["problems"] == []
    assert [f["kind"] for f in result["faults"]] == [f.kind for f in draw(SEED, 5)]
    assert all(f["recovery_s"] is not None for f in result["faults"])
    # The leader changed hands and the checker saw who published what.
    assert result["figures"]["copy_handovers"] >= 1
    assert "1 schedules, 5 faults, 0 failed" in done.stdout
