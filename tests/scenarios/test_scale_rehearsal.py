"""The EC2 scale test's rehearsal: the million-node plan, scaled down, every host's own command
run on a host of its own, a network namespace (NATS clusters, a Spark standalone master and
worker, the replicator on them, the emulators, the checker), and the report made from the local bucket as
`make scale-report` makes an EC2 run's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]


def test_the_million_node_plan_rehearsed_small_passes_its_ground_truth(tmp_path: Path) -> None:
    work = tmp_path / "rehearsal"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "scale", "rehearse", "scenarios/scale/million-realtime.yaml",
         "--nodes", "600", "--duration", "90", "--work", str(work)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "scenario million-realtime: PASS" in done.stdout

    hosts = sorted(p.name for p in (work / "hosts").iterdir())
    # Each host was a network namespace with the address EC2 would give it (10.77.0.N here).
    replicator = next(p for p in (work / "hosts").iterdir() if p.name.startswith("replicator-"))
    assert '"monitor_address":"10.77.0.' in (replicator / "sr.yaml").read_text()
    plan = json.loads((work / "plan" / "hosts.json").read_text())
    assert hosts == sorted(h["name"] for h in plan)  # every host of the plan ran
    assert len([h for h in hosts if h.startswith("emulator-")]) == 4
    bucket = work / "bucket" / "reports" / "million-realtime"
    assert (bucket / "checker" / "check.json").is_file()
    summaries = [json.loads(p.read_text()) for p in bucket.glob("emulator-*/emulator-summary.json")]
    assert len(summaries) == 4 and all(s["failed"] == 0 for s in summaries)

    report = json.loads((work / "report" / "million-realtime.json").read_text())
    assert report["ok"]
    figures = report["figures"]
    published = sum(s["published"] for s in summaries)
    # A first publish per node, every one copied and announced with a `new` advisory.
    assert published > 0 and figures["published"] == figures["read"] == figures["copied"] == published
    assert figures["advisories"] == published
    assert (work / "report" / "million-realtime.png").stat().st_size > 5000
    # Two Spark workers and a standby: the checkpoint (the senders' state written by the
    # workers' executors included) and state_store are on the shared folder standing in for
    # EFS, not on a replicator host.
    checkpoints = work / "shared" / "million-realtime" / "checkpoints"
    states = [p for p in checkpoints.rglob("state") if (p.parent / "offsets").is_dir()]
    assert len(states) == 1 and any(states[0].rglob("*.zip"))  # RocksDB's snapshots
    assert not list((work / "hosts").rglob("checkpoint"))
    # A worker's host was cut off longer than Spark waits for its executor, and the leader's
    # host was killed: the report's checks above passed with them, and the standby took over.
    faults = figures["host_faults"]
    assert faults["worker"] == "spark-worker-1" and faults["worker_cut_s"] >= 45
    assert faults["leader"] != faults["new_leader"] and faults["takeover_s"] > 0
    # Spark gave the cut worker's executor up (and ran its tasks on the other worker).
    assert "Lost executor" in (work / "hosts" / faults["leader"] / "service.log").read_text()
    names = [c["name"] for c in report["checks"]]
    assert "leader's host killed, standby took over" in names and "spark-worker-1 cut off and back" in names
