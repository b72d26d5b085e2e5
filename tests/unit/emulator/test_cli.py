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


def test_plan_arguments_are_checked_before_the_out_file_is_touched(tmp_path: Path) -> None:
    """A shard or data centre the scenario refuses emptied the file `--out` named (a plan made
    earlier, lost to a typo) and left an empty plan behind, which a later step could read as the
    whole plan."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nduration: 10m\nfleet: {nodes: 10}\n")
    out = tmp_path / "plan.csv"
    out.write_text("t,node,size,force\n1.000,node1,1024,0\n")
    for bad, error in (
        (["--shard", "5/2"], "--shard '5/2': need 0 <= i < N"),
        (["--data-centre", "dcX"], "dcX"),
        (["--seed", "-1"], "--seed -1: give a number from 0 to 18446744073709551615"),  # said `seed:`
    ):
        r = subprocess.run(
            [sys.executable, "-m", "emulator.cli", "plan", "-s", str(scenario), *bad, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and error in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert out.read_text() == "t,node,size,force\n1.000,node1,1024,0\n"
