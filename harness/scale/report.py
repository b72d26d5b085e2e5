"""`make scale-report`: the hosts' reports of a scale test (EC2 or its rehearsal), gathered from
the test's bucket, turned into the scenario runner's report (table, JSON, PNG).

In the bucket every host's `reports/` sits under `reports/<scenario>/<host>/`
(terraform/templates/user_data.sh.tftpl). The checker's `check.json` holds each stream's
observation beside its ground truth and the per-second samples; the emulators' summaries say
what the fleet published. BUCKET is an S3 bucket (its name or s3://NAME, fetched with the aws
CLI) or a local directory laid out the same way (a rehearsal's).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.scale.check import CHECK_FILE
from harness.scale.host_faults import FAULTS_FILE, FaultReport, add_fault_checks
from harness.scenario.runner import HopObservation, Observation, evaluate, hop_refs, plot
from harness.scenario.spec import load_spec
from harness.scenario.truth import AdvKey, Report, Truth


class ReportError(Exception):
    """A one-line reason the report cannot be made, with what to do."""


def fetch(bucket: str, scenario: str, dest: Path) -> Path:
    """The directory holding the scenario's host folders: `bucket` itself when it is a local
    directory, else a copy of s3://BUCKET/reports/SCENARIO/ in `dest`."""
    local = Path(bucket) / "reports" / scenario
    if not bucket.startswith("s3://") and ("/" in bucket or Path(bucket).is_dir()):
        # A bucket's name has no slash: this is a directory.
        if not Path(bucket).is_dir():
            raise ReportError(f"{bucket}: no such directory; give the bucket's name or a local copy of it")
        if not local.is_dir():
            raise ReportError(f"{bucket}: no reports/{scenario}/ in it; is it the scale test's bucket?")
        return local
    aws = shutil.which("aws")
    if aws is None:
        raise ReportError(
            f"{bucket}: not a local directory, and the aws CLI is not installed to fetch it from S3 "
            "(apt-get install awscli, or pass the directory the reports were synced to)"
        )
    name = bucket.removeprefix("s3://").rstrip("/")
    dest.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [aws, "s3", "sync", "--only-show-errors", f"s3://{name}/reports/{scenario}/", str(dest)]
    )
    if done.returncode != 0:
        raise ReportError(f"aws s3 sync from s3://{name}/reports/{scenario}/ failed (exit {done.returncode})")
    return dest


def _keys(rows: list[list[Any]]) -> list[AdvKey]:
    return [(str(v), str(e), int(t)) for v, e, t in rows]


def _truth(d: dict[str, Any]) -> Truth:
    return Truth(d["copied"], _keys(d["advisories"]), int(d["published"]), int(d["final_clock_ms"]))


def build_report(hosts_dir: Path, out_dir: Path) -> Report:
    """The report of the run whose hosts' reports are in `hosts_dir` (one folder per host);
    writes <scenario>.json and <scenario>.png into `out_dir`."""
    check = hosts_dir / "checker" / CHECK_FILE
    if not check.is_file():
        raise ReportError(
            f"{check}: missing; the checker host writes it when the run is over "
            "(its service's journal says how far it is: journalctl -u sr-role)"
        )
    summaries = sorted(hosts_dir.glob("emulator-*/emulator-summary.json"))
    if not summaries:
        raise ReportError(
            f"{hosts_dir}: no emulator-*/emulator-summary.json; have the emulator hosts finished?"
        )
    spec = load_spec(hosts_dir / "checker" / "scenario.yaml")
    doc = json.loads(check.read_text())
    emulated = [json.loads(p.read_text()) for p in summaries]
    obs = Observation(
        hops=[
            HopObservation(**{**h, "truth": _truth(h["truth"]), "advisories": _keys(h["advisories"])})
            for h in doc["hops"]
        ],
        published=sum(int(e["published"]) for e in emulated),
        publish_seconds=float(doc["publish_seconds"]),
        publish_rate=sum(float(e["rate"]) for e in emulated),
    )
    report = evaluate(spec, obs)
    report.figures["emulator_hosts"] = len(emulated)
    faults = hosts_dir / FAULTS_FILE
    if faults.is_file():  # the rehearsal's cut worker and killed leader
        add_fault_checks(report, FaultReport(**json.loads(faults.read_text())))
    if doc.get("advisories_until") is not None:
        # A real-time run ends before its senders expire: the advisories due until then.
        report.figures["advisories_until"] = time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(doc["advisories_until"])
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    name = spec.scenario.name
    (out_dir / f"{name}.json").write_text(json.dumps(report.as_dict(), indent=2))
    hops = [h for p in spec.processes() for h in hop_refs(spec, p, {}, [])]
    plot(doc["rows"], out_dir / f"{name}.png", f"{name} (scale test)", spec, hops)
    return report
