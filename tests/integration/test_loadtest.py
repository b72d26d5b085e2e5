"""The locust load test against a real server: what locust counts is what the stream got."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run

from harness.streams import count_messages as count

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_locust_successes_equal_the_stream_message_count(nats_server, tmp_path: Path) -> None:
    env = dict(
        os.environ,
        # A host name, as users give it: the lookup must not hang under gevent.
        SOURCE_URL=nats_server.url.replace("127.0.0.1", "localhost"),
        REPLICATOR="0",
        USERS="100",
        SPAWN_RATE="100",
        DURATION="6s",
        SPEEDUP="600",  # each user publishes every 0.5 s
        REPORT_DIR=str(tmp_path),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "loadtests.run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    with (tmp_path / "loadtest_stats.csv").open() as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    assert ("JS", "publish registration") in rows
    # Locust's stats as it exited (its CSV is rewritten once a second, not at exit).
    final = {(e["method"], e["name"]): e for e in json.loads((tmp_path / "loadtest.json").read_text())}
    publish = final[("JS", "publish registration")]
    ok = int(publish["num_requests"]) - int(publish["num_failures"])
    assert ok > 600  # 100 users x 2/s x 6 s, less spawn-up
    assert run(count(nats_server.url, "CHORIA_REGISTRATION")) == ok
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["publishes_ok"] == summary["stream_received"] == ok
    assert (tmp_path / "loadtest.html").stat().st_size > 10_000
