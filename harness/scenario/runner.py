"""Runs a scenario on real NATS servers: the source cluster (the data centre), the target, the
emulated fleet and the replicator (the real CLI, Spark), then checks the result against the
ground truth and writes a report (table, JSON, PNG)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nats
import yaml
from nats.js.api import KeyValueConfig, StreamConfig

from emulator.publisher import stream_subjects
from harness.localnats import free_port
from harness.process import ReplicatorProcess, entry_state
from harness.proctree import GroupCpu
from harness.scenario.lag import trailing_seconds, worst_by_minute
from harness.scenario.spec import HopSpec, ProcessSpec, ScenarioSpec
from harness.scenario.truth import (
    AdvKey,
    Check,
    Report,
    Truth,
    advisory_keys,
    compare_advisories,
    compare_copies,
    copied_sequences,
    digest,
    ground_truth,
)
from harness.scrape import scrape
from harness.servers import nats_cluster
from harness.streams import count_messages, read_digested, stream_state
from replicator.election import BUCKET as ELECTION_BUCKET
from replicator.nats.jetstream import stream_info
from replicator.sampling.extract import SenderExtractor
from replicator.sampling.rules import SamplingParams

log = logging.getLogger(__name__)

# The election bucket's TTL for scenarios with leader-elected instances (Choria's docs use 10 s).
ELECTION_TTL_S = 5.0


@dataclass(frozen=True)
class HopRef:
    """One replicated stream of a run: which process, which stream entry, where it reads,
    writes and advises, and the process's metrics endpoint."""

    label: str
    process: ProcessSpec
    hop: HopSpec
    source_url: str
    target_url: str
    metrics_urls: tuple[str, ...]
    """One per instance of the process (leader-elected instances: several)."""

    def metrics_url(self) -> str:
        """The metrics of the instance copying this stream now (the first if none is)."""
        if len(self.metrics_urls) > 1:
            key = f"{self.hop.stream}/{self.hop.name}"
            for url in self.metrics_urls:
                if entry_state(url, key) == "replicating":
                    return url
        return self.metrics_urls[0]


@dataclass
class Sampler:
    """Samples stream sizes and each replicator's metrics every second, for the plot and the
    processed rate."""

    streams: dict[str, tuple[str, str]]
    """label -> (cluster URL, stream)"""
    hops: list[HopRef]
    rows: list[dict[str, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    t0: float = 0.0
    """time.monotonic() of the first sample, which rows' "t" count from."""

    def start(self) -> None:
        self.t0 = time.monotonic()
        threading.Thread(target=self._run, daemon=True, name="sampler").start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        labels = {where: label for label, where in self.streams.items()}
        every = [*self.streams.values(), *((h.source_url, h.hop.stream) for h in self.hops)]
        while not self._stop.wait(1.0):
            row: dict[str, float] = {"t": time.monotonic() - self.t0}
            for url, stream in dict.fromkeys(every):  # one lookup a stream a second
                with contextlib.suppress(Exception):
                    messages, last_seq = asyncio.run(stream_state(url, stream))
                    if (url, stream) in labels:
                        row[labels[(url, stream)]] = messages
                    row[f"{url} {stream}.last_seq"] = last_seq
            for h in self.hops:
                with contextlib.suppress(Exception):
                    m = scrape(h.metrics_url(), worker=h.hop.name)
                    for key in ("lag", "received", "sequence"):
                        row[f"{h.label}.{key}"] = m[key]
            self.rows.append(row)

    def processed_rate(self, label: str, total: int, last_seq: int) -> float:
        """Messages per second a hop processed, from its first message to the last (including
        any outage: the source sequence it reached survives restarts)."""
        key = f"{label}.sequence"
        t0 = next((r["t"] for r in self.rows if r.get(key, 0) > 0), None)
        t1 = next((r["t"] for r in self.rows if r.get(key, 0) >= last_seq), None)
        if t0 is None or t1 is None or t1 <= t0:
            return 0.0
        return total / (t1 - t0 + 1.0)  # samples are 1 s apart: count the first second

    def max_lag(self, label: str) -> float:
        return max((r.get(f"{label}.lag", 0) for r in self.rows), default=0)

    def trailing(self, h: HopRef) -> list[tuple[float, float]]:
        """(t, seconds hop `h` trailed its source) at each sample (harness.scenario.lag)."""
        src, done = f"{h.source_url} {h.hop.stream}.last_seq", f"{h.label}.sequence"
        source = [(r["t"], r[src]) for r in self.rows if src in r]
        processed = [(r["t"], r[done]) for r in self.rows if done in r]
        return trailing_seconds(source, processed)


def _params(hop: HopSpec, speedup: float) -> tuple[SenderExtractor | None, SamplingParams | None]:
    if not hop.sampling:
        return None, None
    assert hop.inspect_duration is not None
    inspect_ms = int(hop.inspect_duration / speedup * 1000)
    warn = hop.warn_duration if hop.warn_duration is not None else hop.inspect_duration / 2
    ext = SenderExtractor(
        hop.inspect_field, hop.inspect_header, hop.inspect_subject_token, hop.inspect_force_field
    )
    return ext, SamplingParams(inspect_ms, int(warn / speedup * 1000), hop.size_trigger, hop.stream)


def _parallel(fns: list[Callable[[], object]]) -> None:
    """Run the calls at once (replicators start in parallel); re-raise the first failure."""
    errors: list[BaseException] = []

    def call(fn: Callable[[], object]) -> None:
        try:
            fn()
        except BaseException as e:  # handed to the caller
            errors.append(e)

    threads = [threading.Thread(target=call, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def run_scenario(
    spec: ScenarioSpec, report_dir: Path, replicator_loglevel: str = "info"
) -> tuple[Report, Observation]:
    """Run one scenario, its logs and report in `report_dir`; `replicator_loglevel`: the
    replicators' `loglevel` (debug: a line per batch on where its time went)."""
    s = spec.scenario
    report_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"scenario-{s.name}-"))
    clusters = spec.clusters()
    with contextlib.ExitStack() as stack:
        # Configs, checkpoints and the emulators' summaries; the logs go to report_dir.
        stack.callback(shutil.rmtree, work, True)
        clusters_up = {
            name: stack.enter_context(nats_cluster(c.servers, name, max_file_store=c.max_file_store))
            for name, c in clusters.items()
        }
        urls = {name: c.url for name, c in clusters_up.items()}
        asyncio.run(create_streams(urls, spec))
        procs: dict[str, list[ReplicatorProcess]] = {}
        hops: list[HopRef] = []
        for p in spec.processes():
            urls_of_metrics = []
            for i in range(p.instances):
                port = free_port()
                instance = p.name if p.instances == 1 else f"{p.name}-{i}"
                cfg = work / f"{instance}.yaml"
                cfg.write_text(yaml.safe_dump({
                    "name": p.name,
                    "state_store": str(work / "state" / p.name),  # shared by the instances
                    "monitor_port": port,
                    "loglevel": replicator_loglevel,
                    "streams": [
                        h.entry(urls[h.source], urls[h.target], s.speedup, instance if p.instances > 1 else "")
                        for h in p.streams
                    ],
                }))  # fmt: skip
                log_path = report_dir / f"{s.name}.{instance}.log"
                log_path.unlink(missing_ok=True)  # this run's log only (restarts within it append)
                procs.setdefault(p.name, []).append(ReplicatorProcess(cfg, log_path))
                urls_of_metrics.append(f"http://127.0.0.1:{port}/metrics")
            hops += hop_refs(spec, p, urls, urls_of_metrics)
        everyone = [r for rs in procs.values() for r in rs]
        stack.callback(lambda: _parallel([r.stop for r in everyone]))
        # One after the other, upstream first: JVMs starting together on a small machine starve
        # Spark's Python workers past their fixed 10 s connect-back limit (the query then
        # restarts from its checkpoint, but the run loses a minute).
        for r in everyone:
            r.start()
        warm_up(hops)
        watched = {f"{c}:{st}": (urls[c], st) for c, st in streams_of(spec)}
        sampler = Sampler(watched, hops)
        sampler.start()
        stack.callback(sampler.stop)
        cpu = GroupCpu(
            lambda: {
                "emulators": [e.pid for _, _, e in emulators if e.poll() is None],
                **{
                    f"{name} servers": [p for sv in c.servers if (p := sv.pid)]
                    for name, c in clusters_up.items()
                },
                "replicators": [r.proc.pid for r in everyone if r.proc is not None and r.proc.poll() is None],
            },
            split=frozenset({"replicators"}),
        )
        fleet_file = work / "fleet.yaml"
        fleet_file.write_text(spec.path.read_text() if spec.path else "")
        t0 = time.monotonic()
        emulators: list[tuple[Path, Path, subprocess.Popen[bytes]]] = []
        cpu.start()  # from the fleet's first message until every copy is checked
        stack.callback(lambda: cpu.seconds or cpu.stop())
        for name, c in clusters.items():
            if not c.data_centres:
                continue
            dcs = [arg for dc in c.data_centres for arg in ("--data-centre", dc)]
            errlog = report_dir / f"{s.name}.emulator-{name}.log"
            emulators.append((errlog, work / f"emulator-{name}.json", subprocess.Popen(
                [sys.executable, "-m", "emulator.cli", "run", "--scenario", str(fleet_file), "--url", urls[name],
                 "--summary", str(work / f"emulator-{name}.json"), *dcs],
                stdout=subprocess.DEVNULL, stderr=errlog.open("wb"),
            )))  # fmt: skip
            stack.callback(emulators[-1][2].kill)  # a run cut short stops its fleet too
        outages = [
            (lambda p=p: _outages(procs[p.name], p, t0, s.speedup, s.name))
            for p in spec.processes()
            if p.down
        ]
        outage_thread = threading.Thread(target=_parallel, args=(outages,), daemon=True)
        outage_thread.start()
        for errlog, _, emu in emulators:
            if emu.wait() != 0:
                raise RuntimeError(f"emulator failed; see {errlog}")
        publish_seconds = time.monotonic() - t0
        during_fleet = GroupCpu.percent(*cpu.lap())
        outage_thread.join()
        truths, cut = settle_for_check(spec, hops)
        cpu.stop()
        time.sleep(2)  # anything late (a wrong advisory) arrives too
        finals = {h.label: scrape(h.metrics_url(), worker=h.hop.name) for h in hops}
        _parallel([r.stop for r in everyone])
        sampler.stop()
        fleet_run = (t0 - sampler.t0, t0 - sampler.t0 + publish_seconds)
        observed = observe(hops, truths, finals, sampler, cut, fleet_run)
        summaries = [json.loads(summary.read_text()) for _, summary, _ in emulators]
    obs = Observation(
        hops=observed,
        published=sum(int(x["published"]) for x in summaries),
        publish_seconds=publish_seconds,
        publish_rate=sum(float(x["rate"]) for x in summaries),
        cpu_seconds=cpu.seconds,
        cpu_percent=during_fleet,
    )
    report = evaluate(spec, obs)
    (report_dir / f"{s.name}.json").write_text(json.dumps(report.as_dict(), indent=2))
    plot(sampler.rows, report_dir / f"{s.name}.png", s.name, spec, hops)
    return report, obs


def hop_refs(
    spec: ScenarioSpec, p: ProcessSpec, urls: dict[str, str], metrics_urls: list[str]
) -> list[HopRef]:
    """The streams process `p` replicates, with their clusters' URLs (`urls`: cluster name ->
    URLs) and its instances' metrics URLs; labelled as reports name them."""
    one = len(spec.hops()) == 1
    return [
        HopRef(
            h.name if one else f"{p.name}/{h.name}",
            p,
            h,
            urls.get(h.source, ""),
            urls.get(h.target, ""),
            tuple(metrics_urls),
        )
        for h in p.streams
    ]


def observe(
    hops: list[HopRef],
    truths: dict[str, tuple[Truth, int]],
    finals: dict[str, dict[str, float]],
    sampler: Sampler,
    cut: int | None = None,
    fleet_run: tuple[float, float] | None = None,
) -> list[HopObservation]:
    """What each hop wrote (copies, advisories, read back from the streams) beside its truth,
    and its lag and rate from the replicator's metrics (`finals`: scraped at the end). With a
    `cut` (settle_for_check), the advisories due up to that second on both sides. `fleet_run`:
    when the fleet published, in the sampler's seconds, for the lag in seconds by minute."""
    observed = []
    for h in hops:
        truth, last_seq = truths[h.label]
        if cut is not None:
            truth.advisories = [a for a in truth.advisories if a[2] <= cut]
        copies = asyncio.run(
            read_digested(h.target_url, h.hop.target_name, copied_sequences(h.process.name, h.hop.name))
        )
        advisories = (
            asyncio.run(read_digested(h.source_url, h.hop.advisory_stream, advisory_keys))
            if h.hop.sampling
            else []
        )
        observed.append(HopObservation(
            label=h.label,
            truth=truth,
            copies=copies,
            advisories=sorted(a for a in advisories if cut is None or a[2] <= cut),
            final_lag=int(finals[h.label]["lag"]),
            max_lag=int(sampler.max_lag(h.label)),
            processed_rate=sampler.processed_rate(h.label, truth.published, last_seq),
            lag_seconds_by_minute=(
                worst_by_minute(
                    sampler.trailing(h), fleet_run[0] + h.hop.expect.lag_settle_seconds, fleet_run[1]
                )
                if fleet_run
                else []
            ),
        ))  # fmt: skip
    return observed


def warm_up(hops: list[HopRef], timeout: float = 300) -> None:
    """Wait until every sampled stream has run its first micro-batch (a sampled source runs one
    each second even without data): the first one of a stateful query takes tens of seconds
    (Python workers, code generation, state store), which would otherwise fall inside the run
    and distort the event time of everything downstream."""
    deadline = time.monotonic() + timeout
    for h in hops:
        if not h.hop.sampling:
            continue
        while True:
            with contextlib.suppress(OSError):
                if scrape(h.metrics_url(), worker=h.hop.name)["batches"] >= 1:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{h.label}: no micro-batch ran within {timeout:.0f}s; see its log")
            time.sleep(0.5)
    log.info("replicators warm: %s", ", ".join(h.label for h in hops))


def streams_of(spec: ScenarioSpec) -> list[tuple[str, str]]:
    """(cluster, stream) of every stream the run fills: the fleet's, copies, advisories."""
    out: list[tuple[str, str]] = [(n, c.stream) for n, c in spec.clusters().items() if c.data_centres]
    for _, h in spec.hops():
        out.append((h.target, h.target_name))
        if h.sampling:
            out.append((h.source, h.advisory_stream))
    return list(dict.fromkeys(out))


def _leader(instances: list[ReplicatorProcess], p: ProcessSpec) -> ReplicatorProcess:
    """The instance copying p's first stream entry now (the first instance if none is)."""
    key = f"{p.streams[0].stream}/{p.streams[0].name}"
    for r in instances:
        if entry_state(r.port, key) == "replicating":
            return r
    return instances[0]


def _outages(
    instances: list[ReplicatorProcess], p: ProcessSpec, t0: float, speedup: float, name: str
) -> None:
    for o in sorted(p.down, key=lambda o: o.at):
        begin, end = o.at / speedup, (o.at + o.duration) / speedup
        time.sleep(max(0.0, begin - (time.monotonic() - t0)))
        rep = _leader(instances, p)
        log.info(
            "%s: %s replicator %s for %.1fs",
            name,
            "kill -9 of" if o.kill else "stopping",
            rep.config.stem,
            end - begin,
        )
        if o.kill:
            rep.kill9()
        else:
            rep.stop()
        time.sleep(max(0.0, end - (time.monotonic() - t0)))
        # After a kill the next one comes on the scenario's clock, wherever the new process
        # is by then (starting, planning, mid-batch): that is the point of killing it.
        rep.start(wait=not o.kill)


def settle(
    spec: ScenarioSpec, hops: list[HopRef], final_ms: int | None = None
) -> dict[str, tuple[Truth, int]]:
    """Level by level (a hop's source is final once the hops feeding it are done): compute
    each hop's ground truth from its source stream as it now is, then wait until every stream
    holds what the truths say it will, or a generous limit. Waiting covers the expiry of every
    sender that went silent, after which no advisory can still come; with `final_ms` (a
    clock, ms) only the advisories due by then are waited for."""
    by_key = {(h.process.name, h.hop.name): h for h in hops}
    truths: dict[str, tuple[Truth, int]] = {}
    want: Counter[tuple[str, str]] = Counter()
    for level in spec.hop_levels():
        longest = 0.0
        for p, hop in level:
            h = by_key[(p.name, hop.name)]
            ext, params = _params(hop, spec.scenario.speedup)
            # A partition reads its share of the stream (filter_subject).
            source = asyncio.run(read_digested(h.source_url, hop.stream, digest(ext), hop.filter_subject))
            truth = ground_truth(source, params, final_ms)
            truths[h.label] = (truth, source[-1].seq if source else 0)
            want[(h.target_url, hop.target_name)] += len(truth.copied)
            if params:
                want[(h.source_url, hop.advisory_stream)] += len(truth.advisories)
                longest = max(longest, params.inspect_ms / 1000 if final_ms is None else 0)
        deadline = time.monotonic() + longest + 130
        while time.monotonic() < deadline:
            if all(asyncio.run(count_messages(url, st)) >= n for (url, st), n in want.items()):
                break
            time.sleep(1)
    return truths


# Longer than this between the fleet's last message and its senders' expiry (a real-time run
# with an hour's inspect_duration), a check covers the advisories due until it ends, not all.
MAX_EXPIRY_WAIT_S = 600.0


def expiry_wall_s(spec: ScenarioSpec) -> float:
    """Wall seconds after a sampled stream's last message until its last sender expires."""
    s = spec.scenario
    return max([(h.inspect_duration or 0.0) / s.speedup for _, h in spec.hops() if h.sampling], default=0.0)


def quiet_second(truths: dict[str, tuple[Truth, int]], final_ms: int) -> int:
    """A second (Unix time) before `final_ms` with no advisory due in it or the next: every
    advisory due up to it has been compared, none after it. The replicator stamps an advisory
    within a second of when the rules say (truth.compare_advisories), so an advisory due right
    at the cut could land on either side of it; a quiet cut has none there."""
    due = {a[2] for truth, _ in truths.values() for a in truth.advisories}
    cut = final_ms // 1000 - 3
    while cut in due or cut + 1 in due:
        cut -= 1
    return cut


def settle_for_check(
    spec: ScenarioSpec, hops: list[HopRef]
) -> tuple[dict[str, tuple[Truth, int]], int | None]:
    """settle, once the fleet is done; when its senders expire too long after it to wait for,
    only up to now, and the quiet second (Unix time) up to which the advisories compare."""
    expiry_s = expiry_wall_s(spec)
    if expiry_s <= MAX_EXPIRY_WAIT_S:
        return settle(spec, hops), None
    final_ms = int(time.time() * 1000)
    truths = settle(spec, hops, final_ms)
    cut = quiet_second(truths, final_ms)
    log.info("advisories checked up to %s (the senders expire %.0fs after their last message)",
             time.strftime("%H:%M:%S", time.gmtime(cut)), expiry_s)  # fmt: skip
    return truths, cut


@dataclass
class HopObservation:
    """What one replicated stream produced, next to its ground truth."""

    label: str
    truth: Truth
    copies: list[int]
    advisories: list[AdvKey]
    final_lag: int
    max_lag: int
    processed_rate: float
    lag_seconds_by_minute: list[float] = field(default_factory=list)
    """The most seconds it trailed its source in each minute of the fleet's run after the
    expectation's `lag_settle_seconds` (harness.scenario.lag)."""


@dataclass
class Observation:
    """What a run produced."""

    hops: list[HopObservation]
    published: int
    """By the fleet, into every data centre."""
    publish_seconds: float
    publish_rate: float
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    """Each part's CPU from the fleet's first message until every copy and advisory was checked."""
    cpu_percent: dict[str, float] = field(default_factory=dict)
    """Each part's CPU while the fleet published, as a percentage of the machine (all its cores)."""


def evaluate(spec: ScenarioSpec, obs: Observation) -> Report:
    s = spec.scenario
    report = Report(s.name)
    hop_specs = [h for _, h in spec.hops()]
    one = len(hop_specs) == 1
    for hop, o in zip(hop_specs, obs.hops, strict=True):
        expect, pre = hop.expect, ("" if one else f"{o.label}: ")
        checks = [compare_copies(o.truth, o.copies)]
        if hop.sampling:
            checks.append(compare_advisories(o.truth, o.advisories, expect.advisories))
        ratio = o.truth.published / max(1, len(o.copies))
        if expect.copy_ratio:
            lo, hi = expect.copy_ratio
            checks.append(
                Check("copy ratio (published/copied)", f"{lo}-{hi}", round(ratio, 2), lo <= ratio <= hi)
            )
        counts = Counter(e for _, e, _ in o.advisories)
        for event, (lo_n, hi_n) in sorted(expect.events.items()):
            n = counts.get(event, 0)
            checks.append(Check(f"{event} advisories", f"{lo_n}-{hi_n}", n, lo_n <= n <= hi_n))
        checks.append(
            Check(
                "final lag (messages)",
                f"<= {expect.max_final_lag}",
                o.final_lag,
                o.final_lag <= expect.max_final_lag,
            )
        )
        if expect.max_lag is not None:
            checks.append(
                Check("max lag (messages)", f"<= {expect.max_lag}", o.max_lag, o.max_lag <= expect.max_lag)
            )
        if expect.max_lag_seconds is not None:
            worst = max(o.lag_seconds_by_minute, default=float("inf"))
            checks.append(
                Check(
                    f"lag (s) in every minute after the first {expect.lag_settle_seconds:g} s",
                    f"<= {expect.max_lag_seconds:g}",
                    o.lag_seconds_by_minute or "no samples",
                    worst <= expect.max_lag_seconds,
                )
            )
        if expect.min_rate:
            rate = o.processed_rate
            checks.append(
                Check("processed msg/s", f">= {expect.min_rate:g}", round(rate), rate >= expect.min_rate)
            )
        for c in checks:
            c.name = pre + c.name
        report.checks += checks
    report.figures = {
        "nodes": s.fleet.nodes,
        "speedup": s.speedup,
        "published": obs.published,
        "publish_rate": round(obs.publish_rate),
        "wall_seconds": round(obs.publish_seconds),
    }
    for o in obs.hops:
        figures = {
            "read": o.truth.published,
            "copied": len(o.copies),
            "copy_ratio": round(o.truth.published / max(1, len(o.copies)), 2),
            "fleet_ratio": round(obs.published / max(1, len(o.copies)), 2),
            "advisories": len(o.advisories),
            "processed_rate": round(o.processed_rate),
            "max_lag": o.max_lag,
            "lag_seconds_by_minute": o.lag_seconds_by_minute,
        }
        if one:
            report.figures.update(figures)
        else:
            report.figures[o.label] = figures
    if obs.cpu_percent:
        # Who used the machine's cores: on a shared machine the replicator gets what is left.
        report.figures["cpu_percent_of_machine_while_publishing"] = obs.cpu_percent
        ours = sum(v for k, v in obs.cpu_seconds.items() if k.startswith("replicators"))
        read = sum(o.truth.published for o in obs.hops)
        report.figures["replicator_cpu_us_per_message"] = round(1e6 * ours / max(1, read), 1)
    return report


async def create_streams(urls: dict[str, str], spec: ScenarioSpec) -> None:
    """The fleet's streams in the data centres, and the advisory streams the sampled hops
    publish into; every other stream the replicators create (from their source's config)."""
    clusters = spec.clusters()
    wanted: dict[tuple[str, str], list[str]] = {}
    for name, c in clusters.items():
        if c.data_centres:
            wanted[(name, c.stream)] = stream_subjects(spec.scenario.fleet.subject)
    for _, h in spec.hops():
        if h.sampling:
            wanted[(h.source, h.advisory_stream)] = [h.advisory_subject.replace("%s", "*").replace("%v", ">")]
    elected = {h.source for p in spec.processes() if p.instances > 1 for h in p.streams}
    for name in elected:
        nc = await nats.connect(urls[name].split(","))
        try:
            await nc.jetstream().create_key_value(
                KeyValueConfig(
                    bucket=ELECTION_BUCKET, ttl=ELECTION_TTL_S, replicas=min(3, clusters[name].servers)
                )
            )
        finally:
            await nc.close()
    for (name, stream), subjects in wanted.items():
        nc = await nats.connect(urls[name].split(","))
        try:
            if await stream_info(nc, stream) is not None:  # made by an emulator (scale tests)
                continue
            replicas = min(3, clusters[name].servers)
            await nc.jetstream().add_stream(
                StreamConfig(name=stream, subjects=subjects, allow_direct=True, num_replicas=replicas)
            )
        finally:
            await nc.close()


def plot(
    rows: list[dict[str, float]], path: Path, title: str, spec: ScenarioSpec, hops: list[HopRef]
) -> None:
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

    fed = [f"{n}:{c.stream}" for n, c in spec.clusters().items() if c.data_centres]
    published = [sum(x) for x in zip(*(rate(k) for k in fed), strict=True)]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    axes[0].plot(t, published, label="published msg/s")
    for h in hops:
        axes[0].plot(t, rate(f"{h.label}.received"), label=f"{h.label} processed msg/s")
        axes[1].plot(t, [r.get(f"{h.label}.lag", 0) for r in rows], label=f"{h.label} lag (messages)")
    targets = list(dict.fromkeys(f"{h.hop.target}:{h.hop.target_name}" for h in hops))
    for key in targets:
        axes[0].plot(t, rate(key), linestyle="--", label=f"into {key} msg/s")
    axes[0].legend(loc="upper right", fontsize="small")
    axes[1].legend(loc="upper right", fontsize="small")
    sampled = [h for h in hops if h.hop.sampling]
    for h in sampled:
        key = f"{h.hop.source}:{h.hop.advisory_stream}"
        axes[2].plot(t, [r.get(key, 0) for r in rows], label=f"{key} (total)")
    if sampled:
        axes[2].legend(loc="upper left", fontsize="small")
    else:  # a copy-only scenario publishes no advisories (an empty legend only warns)
        axes[2].text(
            0.5, 0.5, "no sampled hop: no advisories", ha="center", va="center", transform=axes[2].transAxes
        )
    axes[2].set_xlabel("wall seconds")
    fig.suptitle(f"scenario {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
