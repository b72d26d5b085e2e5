"""The EC2 scale test of a scenario, planned: which hosts run what, how busy each cluster and
replicator will be, what it costs an hour; and the files terraform and each host use.

Pure: the same scenario file gives the same bytes. Host commands name other hosts as
`{host:NAME}` (and the host itself as `{self}`); on EC2 each host puts in the fixed private
addresses terraform gives them (terraform/templates/user_data.sh.tftpl), a rehearsal on this
machine (harness/scale/rehearse.py) a loopback address of its own per host. So every command
listens on its host's own address, never on all of them, and keeps its files under its working
directory (/var/lib/stream-replicator on EC2): the same commands run side by side on one machine.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from emulator.fleet import build_fleet
from harness.scenario.spec import HopSpec, ScenarioSpec

ROOT = Path(__file__).resolve().parents[2]
PRICES = ROOT / "terraform" / "prices.yaml"

# What one host of each kind is planned to carry (docs/performance.md has the measurements
# behind them, on a 2-core machine; EC2's 4-vCPU hosts get the same figure as headroom):
# one emulator process published 17,525 acked msg/s of 1 KB; one replicator process read a
# sampled 100,000-node fleet at 6,712 msg/s on 2 cores with its executors beside it.
EMULATOR_MSGS_PER_HOST = 5_000.0
SPARK_WORKER_MSGS = 5_000.0
# The cores each Spark worker offers: its instance type's vCPUs (r6i.xlarge), written into its
# command so the rehearsal's workers offer the same and the replicators' shares below add up.
WORKER_CORES = 4
# Locust users (each a node publishing once per fleet interval / speedup) per locust worker
# host: one locust process drives one core, and a publish waits for its JetStream ack.
LOCUST_USERS_PER_WORKER = 2_000

INSTANCE_TYPES = {
    "nats": "m6i.xlarge",
    "emulator": "c6i.xlarge",
    "spark-master": "m6i.large",
    "spark-worker": "r6i.xlarge",
    "replicator": "m6i.xlarge",
    "locust-master": "c6i.large",
    "locust-worker": "c6i.large",
    "checker": "r6i.large",
}
FIRST_ADDRESS = 10  # hosts get .10, .11, ... of the subnet, in name order
NATS_CLIENT, NATS_ROUTES, NATS_MONITOR = 4222, 6222, 8222
SPARK_MASTER, SPARK_WORKER, SPARK_DRIVER, SPARK_BLOCKS = 7077, 7078, 7079, 7080
REPLICATOR_METRICS = 9108
LOCUST_MASTER = 5557
# The Hadoop version pyspark bundles (its jars/hadoop-client-api-*.jar): s3a's hadoop-aws must
# match it. EC2 hosts fetch it through spark.jars.packages (terraform's user data).
HADOOP_VERSION = "3.5.0"
# Where each replicator process keeps its Spark checkpoints: every instance of it and every Spark
# worker reach the same ones. EC2 hosts put s3a://<bucket>/checkpoints/<scenario> in its place,
# the rehearsal a file:// folder of its local bucket.
CHECKPOINTS = "{checkpoints}"
# Where each replicator process keeps its state_store (the in-flight record, stop and lease
# files): "state" in the host's own folder, or the shared file system when the plan has one.
STATE = "{state}"
# A plan with more than one Spark worker or a standby replicator puts both on a file system
# every worker and replicator host mounts (EFS on EC2, terraform/modules/shared_storage).
# Bytes written there per message read: Spark's offset and commit files per batch and the
# sampling state's changelog per sender seen, with room to spare (an estimate for the price
# table; the rehearsal prints what its shared folder took).
SHARED_BYTES_PER_READ = 200
SPARK_CLASS = '"$(python -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))")/bin/spark-class"'


@dataclass(frozen=True)
class Host:
    name: str
    role: str
    instance_type: str
    command: str


@dataclass
class StreamLoad:
    """One stream of the plan: where it is, how fast it fills, what it holds at the end."""

    cluster: str
    stream: str
    msgs_per_s: float
    mean_bytes: float
    bytes_at_end: float


@dataclass
class Plan:
    scenario: str
    wall_seconds: float
    hosts: list[Host]
    streams: list[StreamLoad]
    replicators: dict[str, float] = field(default_factory=dict)
    """msg/s each replicator process reads."""
    prices: dict[str, float] = field(default_factory=dict)
    prices_date: str = ""
    shared_storage: bool = False
    """Checkpoints and state on a file system every worker and replicator host mounts."""
    efs_usd_per_hour: float = 0.0

    def cost_per_hour(self) -> float:
        return sum(self.prices[h.instance_type] for h in self.hosts) + self.efs_usd_per_hour

    def tfvars(self, scenario_file: str) -> dict[str, Any]:
        names = sorted(h.name for h in self.hosts)
        return {
            "scenario": self.scenario,
            "scenario_file": scenario_file,
            "hadoop_aws_package": f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}",
            "shared_storage": self.shared_storage,
            "hosts": {
                h.name: {
                    "role": h.role,
                    "instance_type": h.instance_type,
                    "address_index": FIRST_ADDRESS + names.index(h.name),
                    "command": h.command,
                }
                for h in sorted(self.hosts, key=lambda h: h.name)
            },
        }

    def table(self) -> str:
        lines = [f"scale plan: {self.scenario} ({self.wall_seconds / 60:,.0f} min of wall time)", ""]
        lines.append(f"{'role':<14}{'hosts':>6}  {'instance type':<14}{'$/h each':>9}")
        roles: dict[str, list[Host]] = {}
        for h in self.hosts:
            roles.setdefault(h.role, []).append(h)
        for role, hs in roles.items():
            t = hs[0].instance_type
            lines.append(f"{role:<14}{len(hs):>6}  {t:<14}{self.prices[t]:>9.4f}")
        if self.shared_storage:
            lines.append(f"{'efs':<14}{1:>6}  {'(estimate)':<14}{self.efs_usd_per_hour:>9.4f}")
        lines.append(f"{'total':<14}{len(self.hosts):>6}  {'':<14}{self.cost_per_hour():>9.2f} $/h")
        lines.append(f"(on-demand prices of {self.prices_date}, terraform/prices.yaml)")
        lines += ["", f"{'stream':<40}{'msg/s':>10}{'mean bytes':>12}{'at the end':>12}"]
        for s in self.streams:
            lines.append(
                f"{s.cluster + '/' + s.stream:<40}{s.msgs_per_s:>10,.0f}{s.mean_bytes:>12,.0f}"
                f"{_gb(s.bytes_at_end):>12}"
            )
        lines += ["", f"{'replicator':<40}{'reads msg/s':>12}"]
        for name, rate in self.replicators.items():
            lines.append(f"{name:<40}{rate:>12,.0f}")
        return "\n".join(lines)


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB"


def load_prices(path: Path = PRICES) -> tuple[str, dict[str, float]]:
    doc = yaml.safe_load(path.read_text())
    return str(doc["date"]), {str(k): float(v) for k, v in doc["usd_per_hour"].items()}


def efs_usd_per_hour(reads_per_s: float, path: Path = PRICES) -> float:
    """The shared file system's cost an hour: what the replicators write to it in an hour, paid
    once as written and kept (stored) for that hour; reads happen only when a task or a
    replicator restarts, and are left out."""
    efs = yaml.safe_load(path.read_text())["efs"]
    gb = reads_per_s * 3600 * SHARED_BYTES_PER_READ / 1e9
    return gb * float(efs["usd_per_gb_written"]) + gb * float(efs["usd_per_gb_month"]) / 730


def _urls(cluster: str, servers: int) -> str:
    return ",".join(f"nats://{{host:nats-{cluster}-{i}}}:{NATS_CLIENT}" for i in range(servers))


def _nats_command(cluster: str, index: int, servers: int) -> str:
    parts = [
        "exec nats-server",
        f"--name nats-{cluster}-{index}",
        f"-a {{self}} -p {NATS_CLIENT} -m {NATS_MONITOR}",
        "-js -sd nats",
    ]
    if servers > 1:
        routes = ",".join(
            f"nats://{{host:nats-{cluster}-{i}}}:{NATS_ROUTES}" for i in range(servers) if i != index
        )
        parts += [
            f"--cluster_name {cluster}",
            f"--cluster nats://{{self}}:{NATS_ROUTES}",
            f"--routes {routes}",
        ]
    return " ".join(parts)


def _share(h: HopSpec, dcs: list[str]) -> list[str]:
    """The data centres whose messages a hop's filter_subject keeps (all without one)."""
    if not h.filter_subject:
        return dcs
    tokens = set(h.filter_subject.split("."))
    return [dc for dc in dcs if dc in tokens]


def _copied_fraction(h: HopSpec, interval: float) -> float:
    if not h.sampling:
        return 1.0
    if h.expect.copy_ratio is not None:
        return 1.0 / max(1.0, h.expect.copy_ratio[0])
    assert h.inspect_duration is not None
    return min(1.0, interval / h.inspect_duration)


# With several workers, the driver gives a silent executor up after 30 s (checked every 5 s)
# rather than Spark's 120 s (checked every 60 s), and runs its tasks on another worker.
SEVERAL_WORKERS_CONF = {
    "spark.network.timeout": "30s",
    "spark.network.timeoutInterval": "5s",
    "spark.executor.heartbeatInterval": "5s",
}


def _core_share(workers: int, applications: int) -> dict[str, str]:
    """Every replicator process on the cluster is a Spark application of its own for as long as
    it runs, a warm standby included: without a share the first to register would hold every
    core and the others could never run a task. `applications`: all of them, every process's
    instances; each gets an executor on every worker with its share of the worker's cores."""
    if applications <= 1:
        return {}
    per_worker = max(1, WORKER_CORES // applications)
    return {"spark.executor.cores": str(per_worker), "spark.cores.max": str(per_worker * workers)}


def _config_json(
    entries: list[dict[str, Any]], name: str, spark_master: str, workers: int = 1, applications: int = 1
) -> str:
    """The replicator's config as one JSON line (JSON is YAML), safe inside single quotes."""
    cfg = {
        "name": name,
        "monitor_port": REPLICATOR_METRICS,
        "monitor_address": "{self}",
        "state_store": f"{STATE}/{name}",
        "checkpoint_store": f"{CHECKPOINTS}/{name}",
        "spark_master": spark_master,
        "spark_conf": {
            "spark.driver.host": "{self}",
            "spark.driver.port": str(SPARK_DRIVER),
            "spark.blockManager.port": str(SPARK_BLOCKS),
            **(SEVERAL_WORKERS_CONF if workers > 1 else {}),
            **_core_share(workers, applications),
        },
        "streams": entries,
    }
    return json.dumps(cfg, sort_keys=True, separators=(",", ":")).replace("'", "\\u0027")


def _locust_hosts(
    users: int, source_urls: str, speedup: float, wall_s: float, metrics_url: str
) -> list[Host]:
    """Optional extra load: locust users publishing registrations into the first data-centre
    cluster (loadtests/locustfile.py, shipped to every host beside the wheel), a master and
    its workers. Their nodes are not the emulator's, so the scenario's ground truth does not
    cover them: a run with locust checks throughput, not advisories."""
    workers = max(1, math.ceil(users / LOCUST_USERS_PER_WORKER))
    env = f"PYTHONPATH=. SOURCE_URL={source_urls} SPEEDUP={speedup:g} REPORT_DIR=reports"
    locustfile = "-f loadtests/locustfile.py"
    master = (
        f"{env}{f' METRICS_URL={metrics_url}' if metrics_url else ''} exec locust {locustfile} --master "
        f"--master-bind-port {LOCUST_MASTER} --headless --expect-workers {workers} -u {users} "
        f"-r {max(1, users // 60)} --run-time {int(wall_s)}s --host {source_urls} --csv reports/locust "
        "--only-summary"
    )
    hosts = [Host("locust-master", "locust-master", INSTANCE_TYPES["locust-master"], master)]
    hosts += [
        Host(
            f"locust-worker-{i}",
            "locust-worker",
            INSTANCE_TYPES["locust-worker"],
            f"{env} exec locust {locustfile} --worker --master-host {{host:locust-master}} "
            f"--master-port {LOCUST_MASTER}",
        )
        for i in range(workers)
    ]
    return hosts


def _checker_command(spec: ScenarioSpec) -> str:
    """The host that makes the streams the scenario's replicators advise into (and the election
    bucket), watches the run, and checks it against the ground truth at its end
    (harness/scale/check.py): its reports/check.json is what `make scale-report` turns into the
    scenario runner's report."""
    clusters = spec.clusters()
    parts = ["exec python -m harness scale check scenario.yaml --out reports"]
    parts += [f"--cluster {name}={_urls(name, c.servers)}" for name, c in clusters.items()]
    for p in spec.processes():
        for i in range(p.instances):
            parts.append(
                f"--metrics {p.name}=http://{{host:replicator-{p.name}-{i}}}:{REPLICATOR_METRICS}/metrics"
            )
    return " ".join(parts)


def make_plan(
    spec: ScenarioSpec, prices: tuple[str, dict[str, float]] | None = None, locust_users: int = 0
) -> Plan:
    """`locust_users` > 0 adds locust hosts with that many users (see _locust_hosts)."""
    s = spec.scenario
    price_date, price_table = prices or load_prices()
    fleet = build_fleet(s)
    initial = slice(0, s.fleet.nodes)
    dc_index = fleet.dc[initial]
    sizes = fleet.size[initial].astype(np.float64)
    per_dc = {}
    for i, dc in enumerate(s.fleet.data_centres):
        mask = dc_index == i
        n = int(mask.sum())
        per_dc[dc] = (n * s.speedup / s.fleet.interval, float(sizes[mask].mean()) if n else 0.0)
    wall = s.duration / s.speedup
    clusters = spec.clusters()

    # Messages per second into each stream: the fleet's, then what each hop copies onwards.
    rate: dict[tuple[str, str], float] = {}
    mean: dict[tuple[str, str], float] = {}
    for name, c in clusters.items():
        if c.data_centres:
            rate[(name, c.stream)] = sum(per_dc[dc][0] for dc in c.data_centres)
            total = rate[(name, c.stream)]
            mean[(name, c.stream)] = (
                sum(per_dc[dc][0] * per_dc[dc][1] for dc in c.data_centres) / total if total else 0.0
            )
    if locust_users > 0:
        # Each locust user publishes once per fleet interval / speedup, as a node does, records
        # of the fleet's sizes, into the first data-centre cluster.
        load = next((name, c.stream) for name, c in clusters.items() if c.data_centres)
        rate[load] += locust_users * s.speedup / s.fleet.interval
    reads: dict[str, float] = {}
    for level in spec.hop_levels():
        for p, h in level:
            src = (h.source, h.stream)
            dcs = [dc for dc in s.fleet.data_centres if dc in clusters[h.source].data_centres]
            share = 1.0
            if h.filter_subject and dcs:
                share = len(_share(h, dcs)) / len(dcs)
            read = rate.get(src, 0.0) * share
            reads[p.name] = reads.get(p.name, 0.0) + read
            dst = (h.target, h.target_name)
            rate[dst] = rate.get(dst, 0.0) + read * _copied_fraction(h, s.fleet.interval)
            mean.setdefault(dst, mean.get(src, 0.0))

    hosts: list[Host] = []
    for name, c in clusters.items():
        hosts += [
            Host(f"nats-{name}-{i}", "nats", INSTANCE_TYPES["nats"], _nats_command(name, i, c.servers))
            for i in range(c.servers)
        ]
    for name, c in clusters.items():
        for dc in c.data_centres:
            n = max(1, math.ceil(per_dc[dc][0] / EMULATOR_MSGS_PER_HOST))
            for i in range(n):
                command = (
                    f"exec fleet-emulator run --scenario scenario.yaml --url {_urls(name, c.servers)} "
                    f"--data-centre {dc} --shard {i}/{n} --create-stream {c.stream} "
                    # As the checker makes it (whichever of them comes first on EC2).
                    f"--replicas {min(3, c.servers)} "
                    "--summary reports/emulator-summary.json --log reports/published.csv"
                )
                hosts.append(Host(f"emulator-{dc}-{i}", "emulator", INSTANCE_TYPES["emulator"], command))
    master = f"spark://{{host:spark-master}}:{SPARK_MASTER}"
    hosts.append(
        Host(
            "spark-master",
            "spark-master",
            INSTANCE_TYPES["spark-master"],
            f"SPARK_LOCAL_IP={{self}} exec {SPARK_CLASS} org.apache.spark.deploy.master.Master --host {{self}} "
            f"--port {SPARK_MASTER} --webui-port 8080",
        )
    )
    # Each application gets 1/applications of every worker (_core_share): the busiest process's
    # leader must still have a worker's worth of its reads.
    applications = sum(p.instances for p in spec.processes())
    busiest = max(reads.values(), default=0.0)
    workers = max(
        1,
        spec.topology.spark_workers,
        math.ceil(sum(reads.values()) / SPARK_WORKER_MSGS),
        math.ceil(busiest * applications / SPARK_WORKER_MSGS) if applications > 1 else 0,
    )
    hosts += [
        Host(
            f"spark-worker-{i}",
            "spark-worker",
            INSTANCE_TYPES["spark-worker"],
            f"SPARK_LOCAL_IP={{self}} exec {SPARK_CLASS} org.apache.spark.deploy.worker.Worker {master} "
            f"--host {{self}} --port {SPARK_WORKER} --webui-port 8081 --cores {WORKER_CORES} --work-dir work",
        )
        for i in range(workers)
    ]
    for p in spec.processes():
        for i in range(p.instances):
            candidate = f"{p.name}-{i}" if p.instances > 1 else ""
            entries = [
                h.entry(_urls(h.source, clusters[h.source].servers), _urls(h.target, clusters[h.target].servers),
                        s.speedup, candidate)
                for h in p.streams
            ]  # fmt: skip
            config = _config_json(entries, p.name, master, workers, applications)
            command = f"printf '%s' '{config}' > sr.yaml && exec stream-replicator run --config sr.yaml"
            hosts.append(
                Host(f"replicator-{p.name}-{i}", "replicator", INSTANCE_TYPES["replicator"], command)
            )

    hosts.append(Host("checker", "checker", INSTANCE_TYPES["checker"], _checker_command(spec)))

    if locust_users > 0:
        first = next(name for name, c in clusters.items() if c.data_centres)
        replicator = next((h.name for h in hosts if h.role == "replicator"), "")
        metrics = f"http://{{host:{replicator}}}:{REPLICATOR_METRICS}/metrics" if replicator else ""
        hosts += _locust_hosts(locust_users, _urls(first, clusters[first].servers), s.speedup, wall, metrics)

    shared = workers > 1 or any(p.instances > 1 for p in spec.processes())
    streams = [
        StreamLoad(
            cluster, stream, r, mean.get((cluster, stream), 0.0), r * wall * mean.get((cluster, stream), 0.0)
        )
        for (cluster, stream), r in sorted(rate.items())
    ]
    missing = sorted({h.instance_type for h in hosts} - set(price_table))
    if missing:
        raise ValueError(f"terraform/prices.yaml: no price for {', '.join(missing)}; add it")
    return Plan(
        scenario=s.name,
        wall_seconds=wall,
        hosts=hosts,
        streams=streams,
        replicators={p: r for p, r in sorted(reads.items())},
        prices=price_table,
        prices_date=price_date,
        shared_storage=shared,
        efs_usd_per_hour=efs_usd_per_hour(sum(reads.values())) if shared else 0.0,
    )


def write_plan(plan: Plan, out_dir: Path, scenario_file: str) -> list[Path]:
    """terraform.tfvars.json and hosts.json (every host's role and command) in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tfvars = out_dir / "terraform.tfvars.json"
    tfvars.write_text(json.dumps(plan.tfvars(scenario_file), indent=2, sort_keys=True) + "\n")
    hosts = out_dir / "hosts.json"
    hosts.write_text(
        json.dumps([asdict(h) for h in sorted(plan.hosts, key=lambda h: h.name)], indent=2, sort_keys=True)
        + "\n"
    )
    return [tfvars, hosts]
