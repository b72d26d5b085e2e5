"""Hosts as network namespaces (harness.netns): real namespaces, so root and iproute2."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_closing_a_lab_from_inside_one_of_its_hosts_kills_what_runs_there_but_not_the_closer() -> None:
    # The campaign enters its control host and closes the lab from there: closing must end what
    # the run left in its namespaces, and must not end the campaign itself.
    script = textwrap.dedent(
        """
        import os, subprocess, time
        from harness.netns import Lab
        lab = Lab(f"nstest{os.getpid()}", {"net": "10.251.7"})
        ctl = lab.add_host("ctl", ["net"], 2)
        left = lab.add_host("left", ["net"], 3)
        lab.enter(ctl)
        sleeper = subprocess.Popen(left.command(["sleep", "60"]))
        time.sleep(0.5)
        lab.close()
        print("sleeper", sleeper.wait(timeout=10), flush=True)
        print("closer alive", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["sleeper -9", "closer alive"]
