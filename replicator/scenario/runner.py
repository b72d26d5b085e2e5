"""Runs a scenario on real NATS servers: the source cluster (the data centre), the target, the
emulated fleet and the replicator (the real CLI, Spark), then checks the result against the
ground truth and writes a report (table, JSON, PNG)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nats
import yaml
from nats.js.api import StreamConfig

from emulator.publisher import stream_subjects
from replicator.localnats import free_port
from replicator.metrics import scrape
from replicator.nats.jetstream import count_messages, read_all
from replicator.sampling.extract import SenderExtractor
from replicator.sampling.rules import SamplingParams
from replicator.scenario.spec import ScenarioSpec
from replicator.scenario.truth import (
    AdvKey,
    Check,
    Report,
    Truth,
    advisory_keys,
    compare_advisories,
    compare_copies,
    copied_sequences,
    ground_truth,
)
from replicator.servers import nats_cluster

log = logging.getLogger(__name__)


@dataclass
class Sampler:
    """Samples the streams and the replicator's metrics every second, for the plot."""

    src: str
    dst: str
    spec: ScenarioSpec
    metrics_url: str = ""
    rows: list[dict[str, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="sampler").start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        t0 = time.monotonic()
        top = self.spec.topology
        while not self._stop.wait(1.0):
            row: dict[str, float] = {"t": time.monotonic() - t0}
            with contextlib.suppress(Exception):
                row["published"] = asyncio.run(count_messages(self.src, top.stream))
                row["copied"] = asyncio.run(count_messages(self.dst, top.target_stream or top.stream))
                row["advisories"] = asyncio.run(count_messages(self.src, top.advisory_stream))
            with contextlib.suppress(Exception):
                m = scrape(self.metrics_url)
                row["lag"], row["received"], row["sequence"] = m["lag"], m["received"], m["sequence"]
            self.rows.append(row)

    def processed_rate(self, total: int, last_seq: int) -> float:
        """Messages per second the replicator processed, from its first message to the last
        (including any outage: the source sequence it reached survives restarts)."""
        t0 = next((r["t"] for r in self.rows if r.get("sequence", 0) > 0), None)
        t1 = next((r["t"] for r in self.rows if r.get("sequence", 0) >= last_seq), None)
        if t0 is None or t1 is None or t1 <= t0:
            return 0.0
        return total / (t1 - t0 + 1.0)  # samples are 1 s apart: count the first second

    @property
    def max_lag(self) -> float:
        return max((r.get("lag", 0) for r in self.rows), default=0)


class ReplicatorProcess:
    def __init__(self, config: Path, log_path: Path) -> None:
        self.config, self.log_path = config, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180) -> None:
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "replicator.cli", "run", "--config", str(self.config)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        starts = self.log_path.read_text(errors="replace").count("replicating to")
        deadline = time.monotonic() + timeout
        while self.log_path.read_text(errors="replace").count("replicating to") <= starts:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"replicator did not start; see {self.log_path}")
            time.sleep(0.25)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None


def _params(spec: ScenarioSpec) -> tuple[SenderExtractor | None, SamplingParams | None]:
    r, k = spec.replicator, spec.scenario.speedup
    if not r.sampling:
        return None, None
    assert r.inspect_duration is not None
    inspect_ms = int(r.inspect_duration / k * 1000)
    warn_ms = int((r.warn_duration if r.warn_duration is not None else r.inspect_duration / 2) / k * 1000)
    ext = SenderExtractor(r.inspect_field, r.inspect_header, r.inspect_subject_token, r.inspect_force_field)
    return ext, SamplingParams(inspect_ms, warn_ms, r.size_trigger, spec.topology.stream)


def run_scenario(spec: ScenarioSpec, report_dir: Path) -> tuple[Report, Observation]:
    s, top = spec.scenario, spec.topology
    report_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"scenario-{s.name}-"))
    report = Report(s.name)
    with (
        nats_cluster(top.source_servers, "dc") as source,
        nats_cluster(top.target_servers, "central") as target,
    ):
        src, dst = source.url, target.url
        asyncio.run(_create_streams(src, spec))
        port = free_port()
        cfg = work / "replicator.yaml"
        cfg.write_text(yaml.safe_dump({
            "name": f"sr_{s.name}".replace("-", "_"),
            "state_store": str(work / "state"),
            "monitor_port": port,
            "streams": [spec.replicator_stream(src, dst)],
        }))  # fmt: skip
        rep = ReplicatorProcess(cfg, report_dir / f"{s.name}.replicator.log")
        rep.start()
        sampler = Sampler(src, dst, spec, f"http://127.0.0.1:{port}/metrics")
        sampler.start()
        fleet_file = work / "fleet.yaml"
        fleet_file.write_text(spec.path.read_text() if spec.path else "")
        summary = work / "emulator.json"
        t0 = time.monotonic()
        emu = subprocess.Popen(
            [sys.executable, "-m", "emulator.cli", "run", "--scenario", str(fleet_file), "--url", src,
             "--summary", str(summary)],
            stdout=subprocess.DEVNULL, stderr=(report_dir / f"{s.name}.emulator.log").open("wb"),
        )  # fmt: skip
        outages = sorted((o.at / s.speedup, (o.at + o.duration) / s.speedup) for o in spec.replicator.down)
        for begin, end in outages:
            time.sleep(max(0.0, begin - (time.monotonic() - t0)))
            log.info("%s: stopping the replicator for %.1fs", s.name, end - begin)
            rep.stop()
            time.sleep(max(0.0, end - (time.monotonic() - t0)))
            rep.start()
        if emu.wait() != 0:
            raise RuntimeError(f"emulator failed; see {report_dir / (s.name + '.emulator.log')}")
        publish_seconds = time.monotonic() - t0
        ext, params = _params(spec)
        source_msgs = asyncio.run(read_all(src, top.stream))
        truth = ground_truth(source_msgs, ext, params)
        # Until the replicator has caught up and every silent sender has expired (then no
        # advisory can still come), or a generous limit.
        settle = (params.inspect_ms / 1000 if params else 0) + 10
        deadline = time.monotonic() + settle + 120
        time.sleep(settle)
        while time.monotonic() < deadline:
            adv = asyncio.run(count_messages(src, top.advisory_stream)) if params else 0
            copied = asyncio.run(count_messages(dst, top.target_stream or top.stream))
            if adv >= len(truth.advisories) and copied >= len(truth.copied):
                break
            time.sleep(1)
        time.sleep(2)
        final = scrape(f"http://127.0.0.1:{port}/metrics")
        rep.stop()
        sampler.stop()
        target_msgs = asyncio.run(read_all(dst, top.target_stream or top.stream))
        advisories = asyncio.run(read_all(src, top.advisory_stream)) if params else []
    obs = Observation(
        truth=truth,
        copies=copied_sequences(target_msgs),
        advisories=advisory_keys(advisories),
        final_lag=int(final["lag"]),
        publish_seconds=publish_seconds,
        publish_rate=float(json.loads(summary.read_text())["rate"]),
        max_lag=int(sampler.max_lag),
        processed_rate=sampler.processed_rate(truth.published, source_msgs[-1].seq if source_msgs else 0),
    )
    report = evaluate(spec, obs)
    (report_dir / f"{s.name}.json").write_text(json.dumps(report.as_dict(), indent=2))
    plot(sampler.rows, report_dir / f"{s.name}.png", s.name)
    return report, obs


@dataclass
class Observation:
    """What a run produced, next to its ground truth."""

    truth: Truth
    copies: list[int]
    advisories: list[AdvKey]
    final_lag: int
    publish_seconds: float
    publish_rate: float
    max_lag: int
    processed_rate: float


def evaluate(spec: ScenarioSpec, obs: Observation) -> Report:
    s, expect = spec.scenario, spec.expect
    report = Report(s.name)
    report.checks.append(compare_copies(obs.truth, obs.copies))
    if spec.replicator.sampling:
        report.checks.append(compare_advisories(obs.truth, obs.advisories, expect.advisories))
    ratio = obs.truth.published / max(1, len(obs.copies))
    if expect.copy_ratio:
        lo, hi = expect.copy_ratio
        report.checks.append(
            Check("copy ratio (published/copied)", f"{lo}-{hi}", round(ratio, 2), lo <= ratio <= hi)
        )
    counts = Counter(e for _, e, _ in obs.advisories)
    for event, (lo_n, hi_n) in sorted(expect.events.items()):
        n = counts.get(event, 0)
        report.checks.append(Check(f"{event} advisories", f"{lo_n}-{hi_n}", n, lo_n <= n <= hi_n))
    report.checks.append(
        Check(
            "final lag (messages)",
            f"<= {expect.max_final_lag}",
            obs.final_lag,
            obs.final_lag <= expect.max_final_lag,
        )
    )
    rate = obs.processed_rate
    if expect.min_rate:
        report.checks.append(
            Check("processed msg/s", f">= {expect.min_rate:g}", round(rate), rate >= expect.min_rate)
        )
    report.figures = {
        "nodes": s.fleet.nodes,
        "speedup": s.speedup,
        "published": obs.truth.published,
        "copied": len(obs.copies),
        "copy_ratio": round(ratio, 2),
        "advisories": len(obs.advisories),
        "publish_rate": round(obs.publish_rate),
        "processed_rate": round(rate),
        "max_lag": obs.max_lag,
        "wall_seconds": round(obs.publish_seconds),
    }
    return report


async def _create_streams(src: str, spec: ScenarioSpec) -> None:
    top = spec.topology
    nc = await nats.connect(src.split(","))
    try:
        js = nc.jetstream()
        replicas = min(3, spec.topology.source_servers)
        await js.add_stream(StreamConfig(name=top.stream, subjects=stream_subjects(spec.scenario.fleet.subject),
                                         allow_direct=True, num_replicas=replicas))  # fmt: skip
        if spec.replicator.sampling:
            adv = spec.replicator.advisory_subject.replace("%s", "*").replace("%v", ">")
            await js.add_stream(StreamConfig(name=top.advisory_stream, subjects=[adv], allow_direct=True,
                                             num_replicas=replicas))  # fmt: skip
    finally:
        await nc.close()


def plot(rows: list[dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(rows) < 2:
        return
    t = [r["t"] for r in rows]

    def rate(key: str) -> list[float]:
        out = [0.0]
        for a, b in itertools.pairwise(rows):
            out.append(max(0.0, (b.get(key, 0) - a.get(key, 0)) / max(1e-9, b["t"] - a["t"])))
        return out

    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    axes[0].plot(t, rate("published"), label="published msg/s")
    axes[0].plot(t, rate("received"), label="replicator processed msg/s")
    axes[0].plot(t, rate("copied"), label="copied msg/s")
    axes[0].legend(loc="upper right")
    axes[1].plot(t, [r.get("lag", 0) for r in rows], color="tab:red", label="lag (messages)")
    axes[1].legend(loc="upper right")
    axes[2].plot(t, [r.get("advisories", 0) for r in rows], color="tab:purple", label="advisories (total)")
    axes[2].legend(loc="upper left")
    axes[2].set_xlabel("wall seconds")
    fig.suptitle(f"scenario {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
