"""`make loadtest`: a bounded, headless locust run against a source cluster, with the replicator
copying to a target, and a check that locust's successes are exactly what the stream received.

Settings (environment, or VAR=value on the make command line): USERS (default 500),
SPAWN_RATE (100), DURATION (60s), SOURCE_URL and TARGET_URL (default: two local nats-servers
started here), STREAM (CHORIA_REGISTRATION), REPLICATOR (1; 0 runs locust alone), SPEEDUP,
RECORD_SIZE (see loadtests/locustfile.py). Reports go to loadtests/reports/: locust's CSV and
HTML, the replicator's copy rate and lag over the run (replicator.csv), and summary.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import yaml
from nats.js.api import StreamConfig

from harness.localnats import free_port, local_cluster
from harness.process import ReplicatorProcess
from harness.scrape import scrape
from replicator.durations import parse_duration

HERE = Path(__file__).parent
SUBJECTS = ["choria.stream.input.registration.>"]


def env(name: str, default: str) -> str:
    return os.environ.get(name) or default


async def stream_messages(url: str, stream: str, create: bool) -> int:
    nc = await nats.connect(url.split(","))
    try:
        js = nc.jetstream()
        try:
            return int((await js.stream_info(stream)).state.messages)
        except nats.js.errors.NotFoundError:
            if not create:
                raise
            await js.add_stream(StreamConfig(name=stream, subjects=SUBJECTS, allow_direct=True))
            return 0
    finally:
        await nc.close()


async def stream_subject_counts(url: str, stream: str) -> dict[str, int]:
    """Messages by subject (the server's first page: up to 100,000 subjects)."""
    nc = await nats.connect(url.split(","))
    try:
        info = await nc.jetstream().stream_info(stream, subjects_filter=">")
        return dict(info.state.subjects or {})
    finally:
        await nc.close()


def acked_by_subject(reports: Path) -> dict[str, int]:
    """What locust's processes wrote at quit: acknowledged publishes by subject."""
    total: dict[str, int] = {}
    for path in reports.glob("published-*.json"):
        for subject, n in json.loads(path.read_text()).items():
            total[subject] = total.get(subject, 0) + int(n)
    return total


def where_counts_differ(acked: dict[str, int], stored: dict[str, int], limit: int = 10) -> list[str]:
    """One line per subject whose stored count is not locust's acknowledged count."""
    lines = [
        f"  {subject}: locust acknowledged {acked.get(subject, 0)}, the stream holds {stored.get(subject, 0)}"
        for subject in sorted(set(acked) | set(stored))
        if acked.get(subject, 0) != stored.get(subject, 0)
    ]
    return lines[:limit] + ([f"  ... and {len(lines) - limit} more subjects"] if len(lines) > limit else [])


@contextlib.contextmanager
def servers() -> Iterator[tuple[str, str]]:
    """The given SOURCE_URL/TARGET_URL, or two local nats-servers on loopback."""
    src, dst = os.environ.get("SOURCE_URL"), os.environ.get("TARGET_URL")
    if src:
        yield src, dst or ""
        return
    with local_cluster(1, "lt-source") as s, local_cluster(1, "lt-target") as t:
        yield s.url, dst or t.url


@contextlib.contextmanager
def replicator(source: str, target: str, stream: str, work: Path, log_path: Path) -> Iterator[str]:
    """The real replicator CLI in copy mode; yields its metrics URL once it is ready."""
    cfg = {
        "name": "loadtest",
        "state_store": str(work / "state"),
        "monitor_port": free_port(),
        "streams": [{"stream": stream, "source_url": source, "target_url": target}],
    }
    path = work / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    rep = ReplicatorProcess(path, log_path)
    try:
        try:
            rep.start(timeout=120)
        except RuntimeError as e:
            raise SystemExit(str(e)) from None
        yield rep.metrics_url
    finally:
        rep.stop()


def wait_caught_up(metrics_url: str, timeout: float = 120) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    m: dict[str, float] = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            m = scrape(metrics_url)
            if m["received"] > 0 and m["lag"] == 0:
                return m
        time.sleep(1)
    return m


def locust_publish_counts(prefix: Path) -> tuple[int, int, dict[str, str]]:
    """(successful publishes, failures, the stats row). The counts come from the stats locust
    saves as it exits (--json-file); its stats CSV is rewritten once a second while it runs
    and not at its exit, so it can miss the last second's publishes (it did once in CI, 1,100
    of 1,200). The CSV's row gives the latency percentiles; its counts, without the JSON."""
    row: dict[str, str] = {}
    with Path(f"{prefix}_stats.csv").open() as f:
        for r in csv.DictReader(f):
            if r["Type"] == "JS" and r["Name"] == "publish registration":
                row = r
    final = Path(f"{prefix}.json")
    if final.is_file():
        for entry in json.loads(final.read_text()):
            if entry.get("method") == "JS" and entry.get("name") == "publish registration":
                total, failed = int(entry["num_requests"]), int(entry["num_failures"])
                return total - failed, failed, row
        return 0, 0, row
    if row:
        total, failed = int(row["Request Count"]), int(row["Failure Count"])
        return total - failed, failed, row
    return 0, 0, row


def run_locust(source: str, metrics_url: str, prefix: Path, users: int, rate: float, duration: str) -> int:
    seconds = parse_duration(duration).total_seconds()
    # Users stop publishing at `seconds` and locust quits once all have stopped; --run-time,
    # this much later, is only the backstop.
    grace = 60
    cmd = [
        sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"), "--headless",
        "-u", str(users), "-r", str(rate), "--run-time", f"{int(seconds + grace)}s", "--stop-timeout", "10",
        "--host", source, "--csv", str(prefix), "--html", f"{prefix}.html", "--json-file", str(prefix),
        "--only-summary",
        "--loglevel", "WARNING",
    ]  # fmt: skip
    child_env = dict(
        os.environ,
        SOURCE_URL=source,
        METRICS_URL=metrics_url,
        REPORT_DIR=str(prefix.parent),
        PUBLISH_SECONDS=str(seconds),
    )
    proc = subprocess.Popen(cmd, env=child_env, start_new_session=True)
    try:
        # --run-time bounds the run; SIGKILL is the backstop if locust ignores its own stop.
        return proc.wait(seconds + grace + 90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        raise SystemExit("locust did not stop within its run time + 90 s; killed") from None


def main() -> int:
    users = int(env("USERS", "500"))
    spawn = float(env("SPAWN_RATE", "100"))
    duration = env("DURATION", "60s")
    stream = env("STREAM", "CHORIA_REGISTRATION")
    with_replicator = env("REPLICATOR", "1") not in ("0", "false", "no")
    reports = Path(env("REPORT_DIR", str(HERE / "reports")))
    reports.mkdir(parents=True, exist_ok=True)
    prefix = reports / "loadtest"
    for stale in reports.glob("published-*.json"):
        stale.unlink()
    summary: dict[str, Any] = {"users": users, "spawn_rate": spawn, "duration": duration}
    with servers() as (source, target), tempfile.TemporaryDirectory() as work:
        before = asyncio.run(stream_messages(source, stream, create=True))
        with contextlib.ExitStack() as stack:
            metrics_url = ""
            if with_replicator:
                if not target:
                    raise SystemExit("TARGET_URL is needed with SOURCE_URL (or REPLICATOR=0)")
                print(f"starting the replicator {source} -> {target} ...", flush=True)
                metrics_url = stack.enter_context(
                    replicator(source, target, stream, Path(work), reports / "replicator.log")
                )
            print(f"locust: {users} users, spawn {spawn}/s, {duration} against {source}", flush=True)
            t0 = time.monotonic()
            code = run_locust(source, metrics_url, prefix, users, spawn, duration)
            summary["locust_seconds"] = round(time.monotonic() - t0, 1)
            ok, failed, row = locust_publish_counts(prefix)
            stored = asyncio.run(stream_messages(source, stream, create=False)) - before
            differences: list[str] = []
            if stored != ok and before == 0:  # the stream holds this run's messages only
                acked = acked_by_subject(reports)
                stored_by_subject = asyncio.run(stream_subject_counts(source, stream))
                differences = (
                    where_counts_differ(acked, stored_by_subject)
                    if acked
                    else [f"  (no published-*.json in {reports}: locust ended before writing it)"]
                )
            summary.update(
                locust_exit=code,
                publishes_ok=ok,
                publishes_failed=failed,
                stream_received=stored,
                publish_rate=round(ok / parse_duration(duration).total_seconds(), 1),
                ack_latency_ms={p: row.get(p) for p in ("50%", "90%", "99%", "100%")},
            )
            if metrics_url:
                m = wait_caught_up(metrics_url)
                summary["replicator"] = {k: int(v) for k, v in m.items()}
    (reports / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    if stored != ok:
        print(f"MISMATCH: locust counted {ok} successful publishes, the stream received {stored}")
        if failed:
            print(f"  ({failed} publishes failed: one that timed out may still have been stored)")
        print("\n".join(differences))
        return 1
    print(f"ok: locust's {ok} successful publishes = {stored} messages received by {stream}")
    print(
        f"reports: {prefix}_stats.csv, {prefix}.json, {prefix}.html, {reports / 'replicator.csv'}, "
        f"{reports / 'summary.json'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
