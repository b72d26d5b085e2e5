"""`make demo`, the README's first command, as a user runs it (a smaller fleet): it ends by
itself with both entries caught up, nothing twice, every node advised new once."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import SLOW_S

pytestmark = pytest.mark.integration


def _entry(report: str, target: str) -> tuple[int, int]:
    """(read, copied) of the report's line for the entry copying into `target`, which must say
    nothing was copied twice and the entry caught up."""
    m = re.search(rf"-> {target}: read ([\d,]+), copied ([\d,]+) .*, 0 duplicates, final lag 0; ", report)
    assert m, report
    return int(m[1].replace(",", "")), int(m[2].replace(",", ""))


def test_the_demo_copies_and_samples_a_fleet_and_reports_both() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "harness.demo", "--nodes", "300", "--records", "4"],
        capture_output=True,
        text=True,
        timeout=2 * SLOW_S,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    published = re.search(r"published ([\d,]+) registration records from 300 nodes", r.stdout)
    assert published, r.stdout
    report = r.stdout.split("=== stream-replicator demo report ===", 1)[1]
    n = int(published[1].replace(",", ""))
    assert _entry(report, "FLEET_REGISTRATION") == (n, n)
    assert _entry(report, "FLEET_SAMPLED") == (n, 300)  # each node's first record only
    assert "{'new': 300, 'timeout': 0, 'recover': 0, 'expire': 0}" in report
