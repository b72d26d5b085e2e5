"""The emulator's command line without a server: bad arguments are one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_plan_out_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """`plan --out` naming a directory was a traceback (found by a review)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nduration: 10m\nfleet: {nodes: 10}\n")
    r = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "plan", "-s", str(scenario), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"--out {tmp_path}: cannot write it (Is a directory): give the path of a file" in r.stderr


def test_plan_that_fails_leaves_no_partial_file(tmp_path: Path) -> None:
    """A check that failed after `--out` was opened left an empty or partial plan behind, which a
    later step could read as the whole plan."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nduration: 10m\nfleet: {nodes: 10}\n")
    out = tmp_path / "plan.csv"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "emulator.cli",
            "plan",
            "-s",
            str(scenario),
            "--shard",
            "5/2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--shard '5/2': need 0 <= i < N" in r.stderr, r.stderr
    assert not out.exists()
