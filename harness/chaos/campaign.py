"""The fault campaign: for each seed, a source and a target cluster of three nats-servers each
(R3 streams), two replicator instances on one election, a fleet publishing, and a nemesis
carrying out the seed's schedule of faults one after another, each healed and waited out
(its recovery time: until the copies hold what the source held when it was healed). Then
the checker compares every target with its source, every advisory with the ground truth, and
the publishers of each target for overlapping leases.

Every process runs on a host of its own (harness.netns): s0-s2 (source servers) on network
`src`, t0-t2 (target servers) on `dst`, r0 and r1 (replicators) and ctl (this process, the
fleet, the checker) on both."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nats
import yaml
from nats.js.api import KeyValueConfig, StreamConfig, StreamSource

from harness.chaos.checker import Copy, copy_with_deletes, exact_copy, handovers, overlapping_publishers
from harness.chaos.schedule import Fault, Topology, draw, replay_command
from harness.localnats import NatsServer, wait_jetstream, write_server_config
from harness.netns import Host, Lab
from harness.process import ReplicatorProcess, readiness
from harness.scenario.truth import advisory_keys, compare_advisories, compare_copies, digest, ground_truth
from harness.streams import read_digested
from replicator.election import BUCKET
from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.readers import RawMessage
from replicator.nats.wire import first_value
from replicator.sampling.extract import SenderExtractor
from replicator.sampling.rules import SamplingParams

log = logging.getLogger("chaos")

NETWORKS = {"src": "10.231.1", "dst": "10.231.2"}
TOPO = Topology()
SPEEDUP = 60
FLEET_SECONDS = 60  # wall seconds the fleet publishes at least (an hour of fleet time)
# ...and after the last fault has recovered, this long more: each entry's leader after the faults
# copies some, so the checker sees the handovers. On a machine too busy for the faults to fit in
# FLEET_SECONDS, the fleet had stopped before the leader moved, and nothing showed the handover.
FLEET_TAIL_S = 10
EMULATOR_STOP_S = 30  # from SIGTERM: it ends its publish attempt under way (up to 5 s), then exits
FLEET_MAX_SECONDS = 1800  # the fleet's own end, should the schedule never stop it
INSPECT_MS, WARN_MS = 10_000, 5_000  # 10 and 5 minutes of fleet time
GUARD_S = max(0.5, TOPO.ttl / 5)  # replicator.election.Lease.for_ttl
RECOVERY_LIMIT_S = 120.0
LANES_ON = "r0"
ADVISORY_SUBJECT = "choria.registration.advisories.%s.%v"
# Entries: name -> (source stream, target stream, subject prefix on the target, extra keys).
ENTRIES: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "copy": ("REG", "REG_COPY", "copy", {}),
    "plain": ("REG", "REG_PLAIN", "plain", {"chain_copies": False}),
    "lanes": ("REG_LIM", "REG_LANES", "lanes", {"order": "subject"}),
    "sampled": ("REG", "REG_SAMPLED", "sampled", {
        "inspect_field": "sender", "inspect_force_field": "force", "size_trigger": 1024,
        "inspect_duration": f"{INSPECT_MS}ms", "warn_duration": f"{WARN_MS}ms",
        "advisory": {"subject": ADVISORY_SUBJECT, "reliable": True},
    }),
}  # fmt: skip


@dataclass
class FaultResult:
    fault: str
    kind: str
    recovery_s: float | None  # None: not recovered within RECOVERY_LIMIT_S
    at_s: float


@dataclass
class ScheduleResult:
    seed: int
    faults: list[FaultResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


class Cluster:
    def __init__(self, name: str, hosts: list[Host], network: str, base: Path) -> None:
        self.servers: list[NatsServer] = []
        addresses = [h.address(network) for h in hosts]
        for h, address in zip(hosts, addresses, strict=True):
            d = base / h.name
            d.mkdir(parents=True, exist_ok=True)
            write_server_config(
                d / "server.conf", h.name, 4222, d / "store", cluster=name, cluster_port=6222,
                routes=[f"{a}:6222" for a in addresses if a != address], max_file_store="4GB", host=address,
            )  # fmt: skip
            self.servers.append(
                NatsServer(h.name, 4222, d / "server.conf", log_file=d / "server.log", host=address,
                           prefix=h.command([]))
            )  # fmt: skip
        _together([s.start for s in self.servers])
        wait_jetstream(self.url, timeout=60)

    @property
    def url(self) -> str:
        return ",".join(s.url for s in self.servers)

    def server(self, name: str) -> NatsServer:
        return next(s for s in self.servers if s.name == name)

    def stop(self) -> None:
        _together([s.stop for s in self.servers])


async def _connect(url: str) -> Any:
    return await nats.connect(
        url.split(","), connect_timeout=3, max_reconnect_attempts=-1, reconnect_time_wait=0.5
    )


async def create_streams(src: str, dst: str) -> None:
    nc = await _connect(src)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="REG", subjects=["choria.stream.input.registration.>"],
                                         num_replicas=3, allow_direct=True))  # fmt: skip
        # Deletes the copies must account for: two messages per node, none older than 20 s.
        await js.add_stream(StreamConfig(name="REG_LIM", sources=[StreamSource(name="REG")], num_replicas=3,
                                         max_msgs_per_subject=2, max_age=20, allow_direct=True))  # fmt: skip
        await js.add_stream(
            StreamConfig(name="ADV", subjects=["choria.registration.advisories.>"], num_replicas=3)
        )
        await js.create_key_value(KeyValueConfig(bucket=BUCKET, ttl=TOPO.ttl, replicas=3))
    finally:
        await nc.close()
    nc = await _connect(dst)
    try:
        js = nc.jetstream()
        for _, target, prefix, _ in ENTRIES.values():
            # Short, for the quiet-server-kill: a copy published again after it must be skipped,
            # not dropped by the window (order: subject's replay check, docs/design.md).
            window = TOPO.duplicate_window
            await js.add_stream(StreamConfig(
                name=target, subjects=[f"{prefix}.>"], num_replicas=3, allow_direct=True, duplicate_window=window,
            ))  # fmt: skip
    finally:
        await nc.close()


def replicator_config(path: Path, name: str, src: str, dst: str, state: Path) -> Path:
    streams = []
    for entry, (stream, target, prefix, extra) in ENTRIES.items():
        if entry == "lanes" and name != LANES_ON:
            continue
        # order: subject does not combine with an election yet: one instance runs it, restarted
        # after its faults and resumed from its checkpoint.
        elected = {} if entry == "lanes" else {"leader_election_name": name}
        streams.append({
            "name": entry, "stream": stream, "target_stream": target, "source_url": src, "target_url": dst,
            "target_subject_prefix": prefix, **elected, **extra,
        })  # fmt: skip
    # Named per host, as fleets that template `name` do: each copy's Choria-SR-Source then says
    # which instance published it.
    doc = {"name": name, "state_store": str(state), "monitor_port": 8222, "streams": streams}
    path.write_text(yaml.safe_dump(doc))
    return path


def fleet_file(path: Path, seed: int) -> Path:
    doc = {
        "name": f"chaos-{seed}",
        "seed": seed,
        "speedup": SPEEDUP,
        "duration": f"{FLEET_MAX_SECONDS}m",  # stopped by the schedule (Schedule.run)
        "fleet": {"nodes": 300, "data_centres": ["dc1"], "interval": "300s",
                  "sizes": {"median": 1500, "sigma": 0.3, "min": 1100, "max": 4000}},
        "events": [
            {"type": "down", "at": "20m", "duration": "15m", "count": 10},
            {"type": "force", "at": "30m", "count": 5},
            {"type": "retire", "at": "40m", "count": 5},
            {"type": "metadata", "at": "50m", "bytes": 3000, "count": 20},
        ],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(doc))
    return path


class System:
    """The clusters, their streams and the two replicators that the schedules run on."""

    def __init__(self, lab: Lab, work: Path) -> None:
        self.lab, self.work = lab, work
        self.replicators: dict[str, ReplicatorProcess] = {}
        self._stack = contextlib.ExitStack()

    def start(self) -> System:
        hosts, stack = self.lab.hosts, self._stack
        self.src = Cluster("src", [hosts[n] for n in TOPO.source_servers], "src", self.work / "servers")
        stack.callback(self.src.stop)
        self.dst = Cluster("dst", [hosts[n] for n in TOPO.target_servers], "dst", self.work / "servers")
        stack.callback(self.dst.stop)
        asyncio.run(create_streams(self.src.url, self.dst.url))
        for name in ("r0", "r1"):
            h = hosts[name]
            cfg = replicator_config(self.work / f"{name}.yaml", name, self.src.url, self.dst.url,
                                    self.work / "state")  # fmt: skip
            self.replicators[name] = ReplicatorProcess(
                cfg, self.work / f"{name}.log",
                command=h.command([sys.executable, "-m", "replicator.cli", "run"]),
                monitor_host=h.address("dst"),
            )  # fmt: skip
        stack.callback(lambda: _together([r.stop for r in self.replicators.values()]))
        for r in self.replicators.values():
            r.start(wait=False)
        for r in self.replicators.values():
            r.wait_ready()
        return self

    def stop(self) -> None:
        self._stack.close()


class Schedule:
    """One seed's schedule, on a running system: the fleet publishes while the faults are carried
    out one after another (for FLEET_SECONDS at least, and FLEET_TAIL_S after the last fault's
    recovery); then the check of everything the system holds."""

    def __init__(self, system: System, seed: int, faults: int, work: Path) -> None:
        self.lab, self.seed, self.work = system.lab, seed, work
        self.src, self.dst, self.replicators = system.src, system.dst, system.replicators
        self.faults = draw(seed, faults, TOPO)
        self.rng = random.Random(seed * 7919)
        self.result = ScheduleResult(seed)
        self.emulator: subprocess.Popen[bytes] | None = None
        self.t0 = time.monotonic()

    def run(self) -> ScheduleResult:
        with contextlib.ExitStack() as stack:
            self.emulator = subprocess.Popen(
                [sys.executable, "-m", "emulator.cli", "run", "--scenario",
                 str(fleet_file(self.work / "fleet.yaml", self.seed)), "--url", self.src.url],
                stdout=subprocess.DEVNULL, stderr=(self.work / "emulator.log").open("wb"),
            )  # fmt: skip
            stack.callback(self.emulator.kill)
            self.t0 = time.monotonic()
            for fault in self.faults:
                time.sleep(fault.gap)
                self.result.faults.append(self.inflict(fault))
            time.sleep(max(FLEET_SECONDS - (time.monotonic() - self.t0), FLEET_TAIL_S))
            self.emulator.terminate()  # it stops publishing and exits 0 (emulator.cli)
            try:
                code = self.emulator.wait(EMULATOR_STOP_S)
            except subprocess.TimeoutExpired:  # a schedule never hangs on it: killed on the way out
                code = None
            if code != 0:
                why = "failed" if code is not None else f"did not stop within {EMULATOR_STOP_S} s of SIGTERM"
                self.result.problems.append(f"the fleet emulator {why}; see {self.work / 'emulator.log'}")
            checked = time.monotonic()
            self.check()
            self.result.figures["check_s"] = round(time.monotonic() - checked)
            self.result.figures["run_s"] = round(checked - self.t0)
        return self.result

    # The nemesis ------------------------------------------------------------------------

    def role(self, role: str) -> tuple[str, ReplicatorProcess]:
        """The instance leading the `copy` entry (or the other one), by their /readyz."""
        leader = None
        for name, r in self.replicators.items():
            doc = readiness(r.metrics_url, timeout=1.0) or {}
            streams = doc.get("streams")
            if isinstance(streams, dict) and streams.get("REG/copy") == "replicating":
                leader = name
        names = sorted(self.replicators)
        leader = leader or names[0]
        name = leader if role == "leader" else next(n for n in names if n != leader)
        return name, self.replicators[name]

    def inflict(self, fault: Fault) -> FaultResult:
        at = time.monotonic() - self.t0
        what = fault.describe()
        if fault.kind in ("kill9", "stall", "term", "cut", "slow"):
            name, rep = self.role(fault.target)
            what = f"{what} ({name})"
        log.info("seed %d at %.0fs: %s", self.seed, at, what)
        if fault.kind == "kill9":
            rep.kill9()
            time.sleep(fault.duration)
            rep.start(wait=False)
        elif fault.kind == "stall":
            rep.stall(fault.duration)
        elif fault.kind == "term":
            rep.stop()
            time.sleep(fault.duration)
            rep.start(wait=False)
        elif fault.kind in ("server-kill", "quiet-server-kill"):
            server = (self.src if fault.target.startswith("s") else self.dst).server(fault.target)
            quiet = fault.kind == "quiet-server-kill"
            if quiet:
                self._signal_fleet(signal.SIGSTOP)
                time.sleep(TOPO.duplicate_window + 1)
            server.kill9()
            time.sleep(fault.duration)
            server.start()
            if quiet:
                self._signal_fleet(signal.SIGCONT)
        elif fault.kind == "stepdown":
            url = self.src.url if fault.target in TOPO.source_streams else self.dst.url
            asyncio.run(_step_down(url, fault.target))
        elif fault.kind == "cut":
            host = self.lab.hosts[name]
            for network in ("src", "dst") if fault.network == "both" else (fault.network,):
                host.cut(network)
            time.sleep(fault.duration)
            host.heal()
        elif fault.kind == "slow":
            host = self.lab.hosts[name]
            host.slow(1500)
            time.sleep(fault.duration)
            host.heal()
        elif fault.kind == "limit":
            asyncio.run(_set_max_msg_size(self.dst.url, fault.target, 1000))
            time.sleep(fault.duration)
            asyncio.run(_set_max_msg_size(self.dst.url, fault.target, -1))
        elif fault.kind == "delete":
            asyncio.run(_delete_some(self.src.url, fault.target, self.rng))
        recovery = self.recover()
        if recovery is None:
            self.result.problems.append(f"{what}: the copies did not catch up within {RECOVERY_LIMIT_S:.0f}s")
        return FaultResult(what, fault.kind, recovery, round(at, 1))

    def _signal_fleet(self, sig: signal.Signals) -> None:
        if self.emulator is not None and self.emulator.poll() is None:
            os.kill(self.emulator.pid, sig)

    def recover(self) -> float | None:
        """Seconds until the stream order copies hold a copy of the source's last message as
        it was when the fault was healed."""
        healed = time.monotonic()
        want = lanes_want = None
        while want is None or lanes_want is None:  # a server just restarted may not answer yet
            want = asyncio.run(_last_seq(self.src.url, "REG"))
            lanes_want = asyncio.run(_last_seq(self.src.url, "REG_LIM"))
            if time.monotonic() - healed > RECOVERY_LIMIT_S:
                return None
        while time.monotonic() - healed < RECOVERY_LIMIT_S:
            got = asyncio.run(_last_copied(self.dst.url, ("REG_COPY", "REG_PLAIN")))
            if got is not None and got >= want:
                break
            time.sleep(0.25)
        else:
            return None
        while time.monotonic() - healed < RECOVERY_LIMIT_S:
            if self._lanes_complete(up_to=lanes_want):
                return round(time.monotonic() - healed, 2)
            time.sleep(0.5)
        return None

    # The checker ------------------------------------------------------------------------

    def check(self) -> None:
        """Once the copies are complete (or a limit), every target against its source."""
        problems = self.result.problems
        ext = SenderExtractor("sender", "", 0, "force")
        params = SamplingParams(INSPECT_MS, WARN_MS, 1024, "REG")
        truth = ground_truth(_again(lambda: read_digested(self.src.url, "REG", digest(ext))), params)
        # Every sender that went silent expires inspect_duration after its last message.
        deadline = time.monotonic() + INSPECT_MS / 1000 + RECOVERY_LIMIT_S
        total = None
        while total is None and time.monotonic() < deadline:
            total = asyncio.run(_last_seq(self.src.url, "REG"))
        while time.monotonic() < deadline:
            counts = asyncio.run(_counts(self.dst.url, ("REG_COPY", "REG_PLAIN", "REG_SAMPLED")))
            advisories = asyncio.run(_counts(self.src.url, ("ADV",)))["ADV"]
            if (
                total is not None
                and counts["REG_COPY"] >= total
                and counts["REG_PLAIN"] >= total
                and counts["REG_SAMPLED"] >= len(truth.copied)
                and advisories >= len(truth.advisories)
            ):
                break
            time.sleep(1)
        while time.monotonic() < deadline and not self._lanes_complete():
            time.sleep(2)
        time.sleep(2)  # anything late (a doubled copy or advisory) arrives too
        source = _again(lambda: _read(self.src.url, "REG"))
        by_seq = {c.source_seq: c.data for c in source}
        limited = _again(lambda: _read(self.src.url, "REG_LIM"))
        figures = self.result.figures
        figures["published"] = len(source)
        for entry, (_, target, _, _) in ENTRIES.items():
            copies = _again(lambda: _read(self.dst.url, target))  # noqa: B023
            if entry in ("copy", "plain"):
                found = exact_copy(by_seq, copies)
            elif entry == "lanes":
                # Read after the copies: the limited stream may still be sourcing what a fault
                # held up, and its lanes may have copied that since it was read (seed 40).
                lim_last = None
                for _ in range(10):  # None: a server of the cluster restarting
                    if (lim_last := asyncio.run(_last_seq(self.src.url, "REG_LIM"))) is not None:
                        break
                    time.sleep(1)
                found = copy_with_deletes(
                    {c.source_seq: c.data for c in limited}, lim_last or 0, copies, True
                )
                if lim_last is None:
                    found = ["the limited stream's last sequence could not be read for the check"]
                    lim_last = 0
                figures["lanes_deleted_before_copied"] = lim_last - len({c.source_seq for c in copies})
            else:
                check = compare_copies(truth, [c.source_seq for c in copies])
                found = [] if check.ok else [f"copies: {check.detail}"]
                got = _again(lambda: read_digested(self.src.url, "ADV", advisory_keys))
                adv = compare_advisories(truth, got, "exact")
                found += [] if adv.ok else [f"advisories: {adv.detail}"]
                figures["advisories"] = len(got)
            found += overlapping_publishers(copies, GUARD_S / 4)
            moves = handovers(copies)
            figures[f"{entry}_handovers"] = len(moves)
            if moves:
                figures[f"{entry}_closest_handover_s"] = round(min(h.gap_s for h in moves), 2)
            problems += [f"{entry} ({target}): {p}" for p in found]

    def _lanes_complete(self, up_to: int | None = None) -> bool:
        """Every message the limited stream still holds (up to `up_to`) has its copy (lanes
        copy per subject: no count or last copy tells)."""
        try:
            held = {c.source_seq for c in asyncio.run(_read(self.src.url, "REG_LIM"))}
            # The limited stream holds only the last 20 s: their copies are among the last few
            # thousand, if they are there.
            copied = {c.source_seq for c in asyncio.run(_read(self.dst.url, "REG_LANES", tail=5000))}
        except Exception:  # a server of the cluster restarting
            return False
        return {s for s in held if up_to is None or s <= up_to} <= copied


def _again(read: Callable[[], Any], tries: int = 5) -> Any:
    """A whole-stream read for the check, read again if it was cut short (a reader fails rather
    than return a range short: a server that just restarted, a consumer's leader moving)."""
    for attempt in range(tries):
        try:
            return asyncio.run(read())
        except Exception:
            if attempt == tries - 1:
                raise
            log.warning("a read for the check failed; reading again", exc_info=True)
            time.sleep(2)
    raise AssertionError("unreachable")


def _together(calls: list[Callable[[], object]]) -> None:
    """The calls at once (servers start and stop, replicators stop); the first error raised."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        for f in [pool.submit(c) for c in calls]:
            f.result()


async def _read(url: str, stream: str, tail: int = 0) -> list[Copy]:
    """The stream's messages (with `tail`, only the last `tail` of them) as copies."""

    def as_copies(chunk: list[RawMessage]) -> list[Copy]:
        out = []
        for m in chunk:
            mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
            seq, who = (mark.sequence, mark.replicator) if mark else (m.seq, "")
            out.append(Copy(seq, m.subject.split(".", 1)[1] if mark else m.subject, who, m.ts_ns, m.data))
        return out

    return await read_digested(url, stream, as_copies, tail=tail)


async def _with(url: str, fn: Callable[[Any], Any]) -> Any:
    try:
        nc = await nats.connect(url.split(","), connect_timeout=2, max_reconnect_attempts=1)
    except Exception:
        return None
    try:
        return await asyncio.wait_for(fn(nc), 5)
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


async def _last_seq(url: str, stream: str) -> int | None:
    async def ask(nc: Any) -> int:
        return int((await nc.jsm().stream_info(stream)).state.last_seq)

    return await _with(url, ask)


async def _last_copied(url: str, streams: tuple[str, ...]) -> int | None:
    """The lowest, over `streams`, of the source sequence of their last copy."""

    async def ask(nc: Any) -> int:
        lowest = None
        for stream in streams:
            info = await nc.jsm().stream_info(stream)
            if info.state.messages == 0:
                return 0
            msg = await nc.jsm().get_msg(stream, info.state.last_seq)
            mark = parse_source_header((msg.headers or {}).get(SOURCE_HEADER))
            seq = mark.sequence if mark else 0
            lowest = seq if lowest is None else min(lowest, seq)
        return lowest or 0

    return await _with(url, ask)


async def _counts(url: str, streams: tuple[str, ...]) -> dict[str, int]:
    async def ask(nc: Any) -> dict[str, int]:
        return {s: int((await nc.jsm().stream_info(s)).state.messages) for s in streams}

    return await _with(url, ask) or dict.fromkeys(streams, 0)


async def _step_down(url: str, stream: str) -> None:
    async def ask(nc: Any) -> None:
        await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=3)

    await _with(url, ask)


async def _set_max_msg_size(url: str, stream: str, size: int) -> None:
    async def ask(nc: Any) -> None:
        info = await nc.jsm().stream_info(stream)
        info.config.max_msg_size = size
        await nc.jsm().update_stream(info.config)

    for _ in range(20):  # a server of the cluster may be down
        if await _with(url, ask) is not None or size != -1:
            return
        await asyncio.sleep(0.5)


async def _delete_some(url: str, stream: str, rng: random.Random) -> None:
    async def ask(nc: Any) -> None:
        state = (await nc.jsm().stream_info(stream)).state
        seqs = {rng.randint(max(state.first_seq, state.last_seq - 300), state.last_seq) for _ in range(5)}
        for seq in sorted(seqs):
            with contextlib.suppress(Exception):  # gone already
                await nc.jsm().delete_msg(stream, seq)

    await _with(url, ask)


def make_lab(prefix: str) -> Lab:
    lab = Lab(prefix, NETWORKS)
    for i, name in enumerate(TOPO.source_servers):
        lab.add_host(name, ["src"], 10 + i)
    for i, name in enumerate(TOPO.target_servers):
        lab.add_host(name, ["dst"], 10 + i)
    for i, name in enumerate(("r0", "r1")):
        lab.add_host(name, ["src", "dst"], 20 + i)
    lab.add_host("ctl", ["src", "dst"], 2)
    return lab


def run_campaign(seeds: list[int], faults: int, out: Path, fresh: bool = False) -> list[ScheduleResult]:
    """Each seed's schedule in turn, on one system (the campaign: each schedule meets what the
    ones before it left), or with `fresh` each on a system of its own (a replay); a line per
    schedule on stdout and in `out`/results.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    lab = make_lab(f"chaos{os.getpid() % 100000}")
    results = []
    system: System | None = None
    try:
        lab.enter(lab.hosts["ctl"])
        for i, seed in enumerate(seeds):
            work = out / f"seed-{seed}"
            work.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            try:
                if system is None:
                    # Its own folder: a system replacing a failed one starts empty.
                    system = System(lab, work if fresh else out / f"system-from-seed-{seed}").start()
                    log.info("system up in %.0fs", time.monotonic() - started)
                result = Schedule(system, seed, faults, work).run()
            except Exception as e:  # a schedule that could not run is a failed one
                log.exception("seed %d", seed)
                result = ScheduleResult(seed, problems=[f"the schedule did not run to its end: {e!r}"])
            result.figures["wall_s"] = round(time.monotonic() - started)
            for h in lab.hosts.values():
                h.heal()
            if system is not None and (fresh or not result.ok):
                system.stop()  # a failed schedule's damage is not the next one's
                system = None
            results.append(result)
            with (out / "results.jsonl").open("a") as f:
                f.write(json.dumps({**asdict(result), "ok": result.ok}) + "\n")
            line = f"seed {seed}: {'ok' if result.ok else 'FAIL'} " + ", ".join(
                f"{r.fault} recovered in {r.recovery_s}s" for r in result.faults
            )
            print(line, flush=True)
            if result.problems:
                so_far = seeds[: i + 1]
                print(f"  replay on fresh servers: {replay_command(seed, faults)}; the campaign up to it: "
                      f"make chaos SEEDS={','.join(map(str, so_far))} FAULTS={faults}", flush=True)  # fmt: skip
            for p in result.problems:
                print(f"  {p}", flush=True)
    finally:
        if system is not None:
            system.stop()
        lab.close()
    return results


def summary(results: list[ScheduleResult]) -> str:
    """Schedules, faults per kind, worst recovery per kind, failing seeds."""
    kinds: dict[str, list[float | None]] = {}
    for r in results:
        for f in r.faults:
            kinds.setdefault(f.kind, []).append(f.recovery_s)
    rows = [f"{len(results)} schedules, {sum(len(r.faults) for r in results)} faults, "
            f"{sum(not r.ok for r in results)} failed"]  # fmt: skip
    rows.append(f"  {'fault':18} {'count':>5} {'worst recovery s':>17} {'median s':>9}")
    for kind, times in sorted(kinds.items()):
        done = sorted(t for t in times if t is not None)
        worst = "never" if None in times else f"{done[-1]:.1f}"
        median = f"{done[len(done) // 2]:.1f}" if done else "-"
        rows.append(f"  {kind:18} {len(times):5d} {worst:>17} {median:>9}")
    for r in results:
        if not r.ok:
            rows.append(f"  seed {r.seed} failed: {r.problems[0]}")
    return "\n".join(rows)


def markdown_summary(results: list[ScheduleResult]) -> str:
    """The report as docs/faults.md shows it: faults per kind, recovery, and what the checker
    found."""
    kinds: dict[str, list[float | None]] = {}
    for r in results:
        for f in r.faults:
            kinds.setdefault(f.kind, []).append(f.recovery_s)
    rows = ["| fault | injected | median recovery s | worst recovery s |", "|---|---|---|---|"]
    for kind, times in sorted(kinds.items()):
        done = sorted(t for t in times if t is not None)
        worst = "not recovered" if None in times else f"{done[-1]:.1f}"
        median = f"{done[len(done) // 2]:.1f}" if done else "-"
        rows.append(f"| `{kind}` | {len(times)} | {median} | {worst} |")
    failed = [r for r in results if not r.ok]
    gaps = [float(v) for r in results for k, v in r.figures.items() if k.endswith("_closest_handover_s")]
    rows += [
        "",
        f"{len(results)} schedules, {sum(len(r.faults) for r in results)} faults, "
        f"up to {max((int(r.figures.get('published', 0)) for r in results), default=0)} messages in "
        f"the fleet's stream at a check, {len(failed)} schedules failed; the closest handover "
        f"between two instances' copies {min(gaps):.2f} s apart (the check fails under 0.2 s)"
        if gaps
        else "",
    ]
    for r in failed:
        rows.append(f"- seed {r.seed}: {'; '.join(r.problems)}")
    return "\n".join(rows)
