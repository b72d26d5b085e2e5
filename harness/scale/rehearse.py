"""`make scale-rehearse`: the EC2 scale test of a scenario rehearsed on this machine.

The scenario is scaled down (its fleet's node count and its duration; nothing else changes),
planned as for EC2 (harness/scale/plan.py), and every host of the plan runs its very command
here: in a folder of its own (its working directory, as /var/lib/stream-replicator is on EC2,
with the scenario file and the code the bucket ships), on a host of its own: a network
namespace (harness.netns) with the address EC2 would give it in a subnet of its own
(10.77.0.N), or, where namespaces cannot be made (not root), a loopback address (127.0.77.N).
`{host:NAME}` and `{self}` are put in as the EC2 hosts do, and `{checkpoints}` is a file://
folder of a local bucket where EC2 has s3a://<bucket>/checkpoints.
Each host's `reports/` is then copied into that bucket, laid out as the S3 one, and the report
is made from it exactly as `make scale-report` makes an EC2 run's.

On EC2 the hosts start in any order and their services retry; here they start role by role
(servers, Spark, the checker, the replicators, then the fleet once the replicators have run a
batch) so a small machine is not asked to start every JVM at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from harness.netns import Lab, LabUnavailable
from harness.process import readiness
from harness.scale.host_faults import FAULTS_FILE, FaultReport, HostFaults, fault_times
from harness.scale.plan import (
    CHECKPOINTS,
    NATS_CLIENT,
    REPLICATOR_METRICS,
    SPARK_MASTER,
    STATE,
    Host,
    Plan,
    make_plan,
    write_plan,
)
from harness.scale.report import build_report
from harness.scenario.runner import hop_refs, warm_up
from harness.scenario.spec import ScenarioSpec, load_spec
from harness.scenario.truth import Report

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.77."
SUBNET = "10.77.0"  # the namespace hosts' network (harness.netns): a bridge of this run's own
CONTROL_ADDRESS = 254  # the rehearsal itself, on that network: it waits on the hosts' ports
# What the bucket ships to every host beside the wheel (terraform/main.tf, "code/").
SHIPPED_CODE = ("harness", "loadtests")
# Roles in the order they start here; within a role, hosts in name order.
START_ORDER = ("nats", "spark-master", "spark-worker", "checker", "replicator", "locust-master",
               "locust-worker", "emulator")  # fmt: skip


class RehearsalError(Exception):
    """A one-line reason the rehearsal stopped, naming the host and its log."""


def scaled_scenario(path: Path, nodes: int, duration_s: float) -> str:
    """The scenario file with its fleet's node count and its duration replaced."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    data["fleet"]["nodes"] = nodes
    data["duration"] = f"{duration_s:g}s"
    data["description"] = (
        f"{data.get('description', '')} (rehearsal: {nodes:,} nodes, {duration_s:g}s)".strip()
    )
    return yaml.safe_dump(data, sort_keys=False)


def host_addresses(plan: Plan, network: str = LOOPBACK.rstrip(".")) -> dict[str, str]:
    """Each host's address on `network` (a /24): the last byte is its offset in the EC2 subnet."""
    hosts = plan.tfvars("scenario.yaml")["hosts"]
    return {name: f"{network}.{h['address_index']}" for name, h in hosts.items()}


def namespace_hosts(plan: Plan) -> Lab | None:
    """A network namespace per host of the plan, and one for the rehearsal itself (entered:
    what it starts runs there too), on a network of their own; None where they cannot be made."""
    try:
        lab = Lab(f"sr{os.getpid() % 100000}", {"ec2": SUBNET})
    except LabUnavailable as e:
        log.warning("hosts on loopback addresses, not namespaces: %s", e)
        return None
    try:
        for name, address in host_addresses(plan, SUBNET).items():
            lab.add_host(name, ["ec2"], int(address.rsplit(".", 1)[1]))
        lab.enter(lab.add_host("rehearsal", ["ec2"], CONTROL_ADDRESS))
    except BaseException:
        lab.close()
        raise
    return lab


@dataclass(frozen=True)
class Storage:
    """Where the replicators keep checkpoints and state_store, as the EC2 hosts would."""

    checkpoints: str  # a file:// URI
    state: str = "state"  # in the host's own folder, or a shared one


def render(command: str, own: str, addresses: dict[str, str], storage: Storage) -> str:
    """The command as a host runs it (terraform/templates/user_data.sh.tftpl does the same;
    there `checkpoints` is s3a://<bucket>/checkpoints/<scenario>, or a folder of the shared
    file system, as `state` then is)."""
    for name, ip in addresses.items():
        command = command.replace(f"{{host:{name}}}", ip)
    return (
        command.replace("{self}", own).replace(CHECKPOINTS, storage.checkpoints).replace(STATE, storage.state)
    )


@dataclass
class HostProcess:
    host: Host
    address: str
    workdir: Path
    prefix: list[str] = field(default_factory=list)
    """Runs the command on its host: `ip netns exec NS` (exec'd in place: the pid is the command's)."""
    proc: subprocess.Popen[bytes] | None = None
    killed: bool = False
    """Killed by the rehearsal (its host died): its exit is expected."""
    _log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "service.log"

    def start(self, addresses: dict[str, str], storage: Storage, env: dict[str, str]) -> None:
        command = render(self.host.command, self.address, addresses, storage)
        self._log = self.log_path.open("ab")
        log.info("%s (%s): %s", self.host.name, self.address, command[:160])
        self.proc = subprocess.Popen(
            [*self.prefix, "bash", "-c", command],
            cwd=self.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])


def _wait(what: str, ok: Any, hosts: list[HostProcess], limit_s: float) -> None:
    """Wait until `ok()`; fail at once if a host's service exited (its log's tail says why)."""
    deadline = time.monotonic() + limit_s
    while not ok():
        for h in hosts:
            rc = h.exited()
            if rc is not None and rc != 0 and not h.killed:
                raise RehearsalError(
                    f"{h.host.name}: its command exited with {rc} while waiting for {what}; "
                    f"see {h.log_path}: {h.tail()}"
                )
        if time.monotonic() > deadline:
            raise RehearsalError(f"{what}: not within {limit_s:.0f}s; see the hosts' service.log")
        time.sleep(0.5)


def _listening(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((address, port)) == 0


def _ready(address: str) -> bool:
    doc = readiness(f"http://{address}:{REPLICATOR_METRICS}/readyz", timeout=1.0)
    return bool(doc and doc.get("ready"))


def _host_dir(work: Path, host: Host, scenario_text: str) -> Path:
    d = work / "hosts" / host.name
    (d / "reports").mkdir(parents=True, exist_ok=True)
    (d / "scenario.yaml").write_text(scenario_text)
    for code in SHIPPED_CODE:
        link = d / code
        if not link.exists():
            link.symlink_to(ROOT / code)
    return d


def rehearse(
    scenario: Path, work: Path, nodes: int, duration_s: float, locust_users: int = 0
) -> tuple[Report, Path]:
    """Run the scaled-down plan of `scenario` under `work`; the report and the bucket folder."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    text = scaled_scenario(scenario, nodes, duration_s)
    scaled = work / "scenario.yaml"
    scaled.write_text(text)
    spec: ScenarioSpec = load_spec(scaled)
    plan = make_plan(spec, locust_users=locust_users)
    write_plan(plan, work / "plan", str(scaled))
    lab = namespace_hosts(plan)
    try:
        return _rehearse(spec, plan, text, work, lab)
    finally:
        if lab is not None:
            lab.close()


def _rehearse(spec: ScenarioSpec, plan: Plan, text: str, work: Path, lab: Lab | None) -> tuple[Report, Path]:
    addresses = host_addresses(plan, SUBNET if lab else LOOPBACK.rstrip("."))
    # The checkpoints go where the S3 ones go, in the local bucket, through the same Hadoop
    # FileSystem calls (file:// rather than s3a://); with shared storage (EFS on EC2), they and
    # state_store go to a folder every host reaches.
    bucket = work / "bucket"
    if plan.shared_storage:
        shared = (work / "shared" / spec.scenario.name).resolve()
        storage = Storage((shared / "checkpoints").as_uri(), str(shared / "state"))
    else:
        storage = Storage((bucket / "checkpoints" / spec.scenario.name).resolve().as_uri())
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)  # hosts run the shipped code from their working directory
    procs = {
        h.name: HostProcess(
            h, addresses[h.name], _host_dir(work, h, text), lab.hosts[h.name].command([]) if lab else []
        )
        for h in plan.hosts
    }
    ordered = sorted(procs.values(), key=lambda p: (START_ORDER.index(p.host.role), p.host.name))
    started: list[HostProcess] = []
    faults: HostFaults | None = None
    times = fault_times(plan, spec)
    s = spec.scenario
    try:
        for role in START_ORDER:
            group = [p for p in ordered if p.host.role == role]
            for p in group:
                p.start(addresses, storage, env)
                started.append(p)
            if role == "nats":
                _wait("the NATS servers", lambda g=group: all(_listening(p.address, NATS_CLIENT) for p in g),
                      started, 60)  # fmt: skip
            elif role == "spark-master":
                _wait("the Spark master", lambda g=group: all(_listening(p.address, SPARK_MASTER) for p in g),
                      started, 120)  # fmt: skip
            elif role == "spark-worker":
                # Registered with the master before any application: else the first ones could
                # get executors on some workers only.
                master_log = procs["spark-master"].log_path
                _wait("the Spark workers' registration",
                      lambda g=group, m=master_log: m.read_text(errors="replace").count("Registering worker") >= len(g),
                      started, 120)  # fmt: skip
            elif role == "replicator":
                _wait(
                    "the replicators' /readyz",
                    lambda g=group: all(_ready(p.address) for p in g),
                    started,
                    600,
                )
                metrics = {
                    pr.name: [
                        f"http://{addresses[f'replicator-{pr.name}-{i}']}:{REPLICATOR_METRICS}/metrics"
                        for i in range(pr.instances)
                    ]
                    for pr in spec.processes()
                }
                warm_up([h for pr in spec.processes() for h in hop_refs(spec, pr, {}, metrics[pr.name])])
        if lab is not None and (times.worker_cut_at is not None or times.leader_kill_at is not None):
            first = spec.processes()[0]
            replicators = {
                f"replicator-{first.name}-{i}": addresses[f"replicator-{first.name}-{i}"]
                for i in range(first.instances)
            }
            key = f"{first.streams[0].stream}/{first.streams[0].name}"
            faults = HostFaults(
                lab, times, replicators, key,
                on_kill=lambda name: setattr(procs[name], "killed", True),
                log_of=lambda name: procs[name].log_path.read_text(errors="replace"),
            )  # fmt: skip
            faults.start()
        checker = procs["checker"]
        limit = s.duration / s.speedup + 900
        _wait("the checker's end", lambda: checker.exited() is not None, started, limit)
        if checker.exited() != 0:
            raise RehearsalError(
                f"checker: exited with {checker.exited()}; see {checker.log_path}: {checker.tail()}"
            )
    finally:
        fault_report = faults.finish() if faults is not None else None
        if fault_report is None and (times.worker_cut_at is not None or times.leader_kill_at is not None):
            # Planned but not made (no namespace hosts here): the report says so and fails.
            fault_report = FaultReport(times.worker_cut_at is not None, times.leader_kill_at is not None)
            fault_report.problems.append(
                "hosts on loopback addresses (not root): no host could be cut or killed"
            )
        for p in reversed(started):
            p.stop()
    for name, p in procs.items():
        # What each host's sr-reports timer does: its reports/ into the bucket, under its name.
        shutil.copytree(p.workdir / "reports", bucket / "reports" / s.name / name, dirs_exist_ok=True)
    if fault_report is not None:
        faults_file = bucket / "reports" / s.name / FAULTS_FILE
        faults_file.parent.mkdir(parents=True, exist_ok=True)
        faults_file.write_text(json.dumps(fault_report.as_dict(), indent=2) + "\n")
    report = build_report(bucket / "reports" / s.name, work / "report")
    return report, bucket
