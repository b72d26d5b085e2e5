"""The fleet emulator against a real server: the stream holds exactly the planned messages."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from helpers import run

from emulator.planlog import read_log
from emulator.scenario import load_scenario
from emulator.schedule import Schedule
from harness.servers import nats_cluster
from harness.streams import count_messages, read_all

pytestmark = pytest.mark.integration

SCENARIO = {
    "name": "emulator-it",
    "seed": 42,
    "speedup": 300,
    "duration": "10m",
    "fleet": {
        "nodes": 10_000,
        "data_centres": ["dc1", "dc2"],
        "sizes": {"median": 1500, "min": 1100, "max": 4000},
    },
    "events": [
        {"type": "down", "at": "3m", "duration": "4m", "count": 300},
        {"type": "partition", "at": "2m", "duration": "1m", "dc": "dc2"},
        {"type": "retire", "at": "6m", "fraction": 0.02},
        {"type": "join", "at": "1m", "count": 200, "dc": "dc1"},
        {"type": "metadata", "at": "4m", "bytes": 700, "count": 50},
        {"type": "force", "at": "5m", "count": 20},
    ],
}


def test_ten_thousand_node_fleet_lands_exactly_the_planned_messages(nats_server, tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    log, summary = tmp_path / "published.csv", tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "run", "--scenario", str(path), "--url", nats_server.url,
         "--create-stream", "REGISTRATION", "--log", str(log), "--summary", str(summary)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]

    sched = Schedule(load_scenario(path))
    fleet = sched.fleet
    planned = [
        (fleet.identity(n), size, force)
        for _, _, p in sched.ticks()
        if p is not None
        for n, size, force in zip(p.node.tolist(), p.size.tolist(), p.force.tolist(), strict=True)
    ]
    stored = run(read_all(nats_server.url, "REGISTRATION"))
    assert len(stored) == len(planned) == json.loads(summary.read_text())["published"]

    prefix = "choria.stream.input.registration."
    assert all(m.subject.startswith(prefix) for m in stored)
    got = Counter((m.subject.removeprefix(prefix), len(m.data)) for m in stored)
    want = Counter((ident, size) for ident, size, _ in planned)
    assert got == want  # count per node, subject and size of every message

    forced = Counter(json.loads(m.data)["sender"] for m in stored if json.loads(m.data)["force"])
    assert forced == Counter(ident for ident, _, force in planned if force)
    assert len(forced) == 20

    # The run's own log agrees with the stream, sequence by sequence.
    rows = list(read_log(log))
    by_seq = {m.seq: m for m in stored}
    assert len(rows) == len(stored)
    for r in rows:
        m = by_seq[r.seq]
        assert m.subject == prefix + r.node and len(m.data) == r.size


def test_a_server_restart_mid_run_loses_nothing_and_keeps_the_schedule(tmp_path: Path) -> None:
    # The server process itself is restarted (same port and store), so this test drives the
    # nats-server binary directly rather than the shared fixture.

    scenario = {
        "name": "restart",
        "seed": 5,
        "speedup": 300,
        "duration": "60m",  # 12 s of wall time
        "fleet": {"nodes": 3000, "sizes": {"median": 1200, "min": 1100, "max": 2000}},
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(scenario))
    with nats_cluster(1, "restart") as c:
        summary = tmp_path / "summary.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "emulator.cli", "run", "--scenario", str(path), "--url", c.url,
             "--create-stream", "REGISTRATION", "--summary", str(summary)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        import time

        # Crash the server with publishes certainly in flight: once the emulator (whose start-up
        # time varies with the machine's load) has stored a first few thousand messages, freeze the
        # server for a second (the emulator keeps sending; nothing is read or acked), then kill it.
        # What it never read is lost with it and must be republished from the emulator's side.
        deadline = time.monotonic() + 60
        while run(count_messages(c.url, "REGISTRATION")) < 2000:
            assert proc.poll() is None and time.monotonic() < deadline, "the emulator never got going"
            time.sleep(0.1)
        server = c.servers[0]
        server.freeze()
        time.sleep(1.0)
        server.kill9()  # SIGKILL ends a frozen server too
        time.sleep(0.5)
        server.start()
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        st = json.loads(summary.read_text())
        planned = sum(len(p) for _, _, p in Schedule(load_scenario(path)).ticks() if p is not None)
        stored = run(read_all(c.url, "REGISTRATION"))
    assert st["published"] == st["scheduled"] == planned and st["failed"] == 0
    assert st["republished"] > 0  # the outage was felt, and made good
    assert len(stored) == planned  # nothing lost, nothing doubled (Nats-Msg-Id)
    assert len({(m.subject, m.data[:200]) for m in stored}) == planned
    assert st["max_behind_seconds"] < 30  # it caught up with its schedule


def test_the_stream_it_creates_on_a_cluster_keeps_the_replicas_asked_for(tmp_path: Path) -> None:
    """A scale test's emulator may make the data centre's stream before the checker does: both
    make it with the cluster's replicas (harness/scale/plan.py), so either comes first."""
    scenario = {"name": "replicas", "seed": 1, "speedup": 600, "duration": "5m", "fleet": {"nodes": 200}}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(scenario))
    with nats_cluster(3, "replicas") as c:
        proc = subprocess.run(
            [sys.executable, "-m", "emulator.cli", "run", "--scenario", str(path), "--url", c.url,
             "--create-stream", "REGISTRATION", "--replicas", "3"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        info = run(_stream_info(c.url, "REGISTRATION"))
        assert info.config.num_replicas == 3
        assert info.state.messages == run(count_messages(c.url, "REGISTRATION")) > 0


async def _stream_info(url: str, stream: str) -> Any:
    nc = await nats.connect(url.split(","))
    try:
        return await nc.jetstream().stream_info(stream)
    finally:
        await nc.close()


def test_a_full_stream_ends_the_run_at_once_with_one_line_that_says_so(tmp_path: Path) -> None:
    """The server's storage used up mid-run: the emulator says so and stops, instead of waiting
    60 s on every one of thousands of publishes (a million-node run's did, for minutes)."""
    scenario = {
        "name": "full",
        "seed": 3,
        "speedup": 600,
        "duration": "10m",
        "fleet": {"nodes": 3000, "sizes": {"median": 4000, "min": 3000, "max": 6000}},
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(scenario))
    with nats_cluster(1, "full", max_file_store="2MB") as c:
        proc = subprocess.run(
            [sys.executable, "-m", "emulator.cli", "run", "--scenario", str(path), "--url", c.url,
             "--create-stream", "REGISTRATION"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "the stream has no room for" in last and "max_file_store" in last, last
