"""What the rehearsal does to its namespace hosts mid-run, where the plan has the hosts for it:
a Spark worker's host cut off from the network for longer than Spark waits for an executor
(its tasks are rescheduled on the other worker, a sampled stream's state read from the shared
checkpoint), then brought back; and the leading replicator's host killed (every process in it,
as a host that dies), so that its standby on another host takes over from the shared state.

The figures (when, how long, the takeover time) go into the rehearsal's report."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.netns import Lab
from harness.process import readiness
from harness.scale.plan import REPLICATOR_METRICS, Plan
from harness.scenario.spec import ScenarioSpec
from harness.scenario.truth import Check, Report

log = logging.getLogger(__name__)

# Longer than the plan's spark.network.timeout for a cluster of several workers (30 s): the
# driver gives the cut worker's executor up and runs its tasks elsewhere.
WORKER_CUT_S = 45.0


@dataclass
class FaultTimes:
    """Seconds after the fleet starts publishing."""

    worker_cut_at: float | None = None
    worker: str = ""
    leader_kill_at: float | None = None


def fault_times(plan: Plan, spec: ScenarioSpec) -> FaultTimes:
    """A worker cut early in the run and the leader's host killed once it has healed, where the
    plan has a second worker and a standby (each fault alone otherwise)."""
    wall = plan.wall_seconds
    workers = sorted(h.name for h in plan.hosts if h.role == "spark-worker")
    standby = any(p.instances > 1 for p in spec.processes())
    times = FaultTimes()
    if len(workers) > 1:
        times.worker_cut_at, times.worker = min(10.0, wall / 6), workers[-1]
    if standby:
        healed = (times.worker_cut_at + WORKER_CUT_S) if times.worker_cut_at is not None else 0.0
        times.leader_kill_at = max(healed + 10.0, wall * 0.5)
    return times


# Where the rehearsal leaves its report of them, among the hosts' reports (harness.scale.report).
FAULTS_FILE = "rehearsal/host-faults.json"


@dataclass
class FaultReport:
    worker_cut_planned: bool = False
    leader_kill_planned: bool = False
    worker: str = ""
    worker_cut_at_s: float | None = None
    worker_cut_s: float | None = None
    executor_lost: bool | None = None
    """Whether the leading driver's log says Spark gave the cut worker's executor up."""
    leader: str = ""
    leader_killed_at_s: float | None = None
    takeover_s: float | None = None
    """From the kill until another instance reported `replicating` for the entry."""
    new_leader: str = ""
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kill_host(lab: Lab, name: str) -> int:
    """SIGKILL to every process in the host's namespace: the host died. How many there were."""
    netns = lab.hosts[name].netns
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        if int(pid) != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    return len(pids)


def _state(address: str, key: str) -> str | None:
    streams = (readiness(f"http://{address}:{REPLICATOR_METRICS}/readyz", timeout=1.0) or {}).get("streams")
    return str(streams.get(key)) if isinstance(streams, dict) and key in streams else None


class HostFaults(threading.Thread):
    """Runs the fault times from `start_at` (monotonic), on hosts of `lab`; `on_kill(name)` is
    told a host is being killed (its service's exit is then expected)."""

    def __init__(
        self,
        lab: Lab,
        times: FaultTimes,
        replicators: dict[str, str],
        entry_key: str,
        on_kill: Any,
        log_of: Any,
    ) -> None:
        super().__init__(name="host-faults", daemon=True)
        self.lab, self.times, self.replicators, self.key = lab, times, replicators, entry_key
        self.on_kill, self.log_of = on_kill, log_of
        self.report = FaultReport(times.worker_cut_at is not None, times.leader_kill_at is not None)
        self.start_at = time.monotonic()
        self._halt = threading.Event()

    def _sleep_until(self, t: float) -> bool:
        return not self._halt.wait(max(0.0, self.start_at + t - time.monotonic()))

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # a fault not made is a failed rehearsal, said in its report
            log.exception("host faults")
            self.report.problems.append(f"the host faults did not run: {e!r}")

    def _run(self) -> None:
        t, r = self.times, self.report
        if t.worker_cut_at is not None:
            if not self._sleep_until(t.worker_cut_at):
                return
            host = self.lab.hosts[t.worker]
            leader = self._leader()
            log.info("host faults: %s cut off for %.0fs", t.worker, WORKER_CUT_S)
            host.cut("ec2")
            r.worker, r.worker_cut_at_s = t.worker, round(time.monotonic() - self.start_at, 1)
            self._halt.wait(WORKER_CUT_S)
            host.restore("ec2")
            r.worker_cut_s = round(time.monotonic() - self.start_at - r.worker_cut_at_s, 1)
            address = self.lab.hosts[t.worker].address()
            text = self.log_of(leader) if leader is not None else ""
            r.executor_lost = any("Lost executor" in ln and address in ln for ln in text.splitlines())
            log.info("host faults: %s back after %.1fs; %s lost its executor there: %s",
                     t.worker, r.worker_cut_s, leader, r.executor_lost)  # fmt: skip
        if t.leader_kill_at is not None:
            if not self._sleep_until(t.leader_kill_at):
                return
            leader = self._leader()
            if leader is None:
                r.problems.append(f"no one leader of {self.key} to kill within 30 s")
                return
            r.leader = leader
            self.on_kill(r.leader)
            # As a host that dies: silence first (no connection is closed, so its peers find out
            # by their timeouts and the election's TTL), then nothing runs there any more.
            self.lab.hosts[r.leader].cut("ec2")
            killed = kill_host(self.lab, r.leader)
            killed_at = time.monotonic()
            r.leader_killed_at_s = round(killed_at - self.start_at, 1)
            log.info("host faults: %s (leading %s) killed: %d processes", r.leader, self.key, killed)
            others = {n: a for n, a in self.replicators.items() if n != r.leader}
            while not self._halt.wait(0.25):
                now = [n for n, a in others.items() if _state(a, self.key) == "replicating"]
                if now:
                    r.new_leader, r.takeover_s = now[0], round(time.monotonic() - killed_at, 1)
                    log.info("host faults: %s took over in %.1fs", r.new_leader, r.takeover_s)
                    return
                if time.monotonic() - killed_at > 300:
                    r.problems.append(f"no instance took {self.key} over within 300 s of {r.leader}'s death")
                    return

    def _leader(self) -> str | None:
        """The one instance that reports the entry `replicating` (asked for up to 30 s: a
        leader may be busy or between batches)."""
        deadline = time.monotonic() + 30
        while not self._halt.is_set():
            leaders = [n for n, a in self.replicators.items() if _state(a, self.key) == "replicating"]
            if len(leaders) == 1:
                return leaders[0]
            if time.monotonic() > deadline:
                return None
            self._halt.wait(0.5)
        return None

    def finish(self) -> FaultReport:
        """Stopped where it is (a cut host restored); what it did."""
        self._halt.set()
        self.join(10)
        if self.times.worker_cut_at is not None:
            with contextlib.suppress(Exception):
                self.lab.hosts[self.times.worker].heal()
        return self.report


def add_fault_checks(report: Report, faults: FaultReport) -> None:
    """The faults as checks of the report (each made as planned; the standby took over) and
    their figures."""
    if faults.worker_cut_planned:
        report.checks.append(Check(
            f"{faults.worker or 'a Spark worker'} cut off and back", f"{WORKER_CUT_S:.0f}s", f"{faults.worker_cut_s}s",
            faults.worker_cut_s is not None and faults.worker_cut_s >= WORKER_CUT_S,
        ))  # fmt: skip
        report.checks.append(Check(
            "the leader's executor there lost and replaced", "lost", "lost" if faults.executor_lost else "not lost",
            bool(faults.executor_lost), "the leading driver's log: TaskSchedulerImpl: Lost executor ... on <worker>",
        ))  # fmt: skip
    if faults.leader_kill_planned:
        report.checks.append(Check(
            "leader's host killed, standby took over", "takeover", f"{faults.takeover_s}s",
            faults.takeover_s is not None, f"{faults.leader} -> {faults.new_leader}",
        ))  # fmt: skip
    for problem in faults.problems:
        report.checks.append(Check("host faults", "made", "not made", False, problem))
    report.figures["host_faults"] = {
        k: v
        for k, v in faults.as_dict().items()
        if k != "problems" and not k.endswith("_planned") and v not in (None, "")
    }
