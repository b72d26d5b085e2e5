"""The scale test's pure parts: what a rehearsal host runs (addresses put in, the scenario
scaled), the cut-off of a real-time run's advisory check, and the report's clear refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from harness.scale.plan import HADOOP_VERSION, make_plan
from harness.scale.rehearse import (
    CONTROL_ADDRESS,
    LOOPBACK,
    SUBNET,
    Storage,
    host_addresses,
    render,
    scaled_scenario,
)
from harness.scale.report import ReportError, build_report, fetch
from harness.scenario.runner import quiet_second
from harness.scenario.spec import load_spec
from harness.scenario.truth import Truth

ROOT = Path(__file__).resolve().parents[3]
SCALE = sorted((ROOT / "scenarios" / "scale").glob("*.yaml"))


@pytest.mark.parametrize("path", SCALE, ids=lambda p: p.stem)
def test_every_host_listens_on_its_own_address_and_keeps_its_files_in_its_folder(path: Path) -> None:
    """What lets the same commands run side by side on one machine in a rehearsal."""
    plan = make_plan(load_spec(path), locust_users=100)
    for h in plan.hosts:
        assert "0.0.0.0" not in h.command, h.name
        assert not re.search(r"(?<![\w.])/(var|opt|etc|tmp)/", h.command), f"{h.name}: an absolute path"
    roles = {h.role for h in plan.hosts}
    assert {"nats", "emulator", "spark-master", "spark-worker", "replicator", "checker"} <= roles
    checker = next(h for h in plan.hosts if h.role == "checker").command
    for name in load_spec(path).clusters():
        assert f"--cluster {name}=" in checker


def test_a_rehearsal_host_gets_the_address_ec2_would_give_it_on_loopback() -> None:
    plan = make_plan(load_spec(SCALE[0]))
    addresses = host_addresses(plan)
    tfvars = plan.tfvars("x.yaml")["hosts"]
    assert addresses == {n: f"{LOOPBACK}{h['address_index']}" for n, h in tfvars.items()}
    assert len(set(addresses.values())) == len(addresses)
    assert host_addresses(plan, SUBNET) == {n: f"{SUBNET}.{h['address_index']}" for n, h in tfvars.items()}
    assert CONTROL_ADDRESS not in {h["address_index"] for h in tfvars.values()}
    replicator = next(h for h in plan.hosts if h.role == "replicator")
    command = render(
        replicator.command, addresses[replicator.name], addresses, Storage("file:///b/checkpoints/s")
    )
    assert "{" + "host:" not in command and "{self}" not in command and "{checkpoints}" not in command
    assert "{state}" not in command and '"state_store":"state/' in command
    assert f"spark://{addresses['spark-master']}:7077" in command
    assert f'"monitor_address":"{addresses[replicator.name]}"' in command
    # Every instance of a replicator process and every Spark worker reach the same checkpoints.
    assert (
        f'"checkpoint_store":"file:///b/checkpoints/s/{replicator.name.removeprefix("replicator-").rsplit("-", 1)[0]}"'
        in command
    )


def test_the_s3a_connector_ec2_hosts_fetch_matches_the_hadoop_that_pyspark_bundles() -> None:
    """hadoop-aws must be the very version of the hadoop-client jars Spark runs with."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    bundled = [p.name for p in jars.glob("hadoop-client-api-*.jar")]
    assert bundled == [f"hadoop-client-api-{HADOOP_VERSION}.jar"]
    tfvars = make_plan(load_spec(SCALE[0])).tfvars("x.yaml")
    assert tfvars["hadoop_aws_package"] == f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}"


def test_a_scaled_scenario_changes_the_fleet_size_and_duration_and_nothing_else(tmp_path: Path) -> None:
    original = yaml.safe_load(SCALE[0].read_text())
    scaled = yaml.safe_load(scaled_scenario(SCALE[0], 600, 60))
    assert scaled["fleet"]["nodes"] == 600 and scaled["duration"] == "60s"
    for key in set(original) - {"fleet", "duration", "description"}:
        assert scaled[key] == original[key], key
    assert {k: v for k, v in scaled["fleet"].items() if k != "nodes"} == {
        k: v for k, v in original["fleet"].items() if k != "nodes"
    }
    path = tmp_path / "s.yaml"
    path.write_text(scaled_scenario(SCALE[0], 600, 60))
    assert load_spec(path).scenario.fleet.nodes == 600


def test_the_cut_of_a_real_time_check_falls_in_a_second_with_no_advisory_due_around_it() -> None:
    due = [("n1", "new", 1000), ("n2", "new", 997), ("n3", "timeout", 996), ("n4", "new", 990)]
    truths = {"hop": (Truth([], due, 4, 0), 4)}
    cut = quiet_second(truths, 1_000_500)
    assert cut <= 1000 - 3
    seconds = {a[2] for a in due}
    assert cut not in seconds and cut + 1 not in seconds
    assert cut == 994  # 997 and 996 are due, 995 is next to 996: the first quiet one below
    assert quiet_second(truths, 1_001_500) == 998  # 998 and 999 are quiet
    assert quiet_second({"hop": (Truth([], [], 0, 0), 0)}, 2_000_000) == 1997


def test_the_report_refuses_what_is_not_a_finished_run_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no such directory"):
        fetch(str(tmp_path / "absent"), "million-realtime", tmp_path / "x")
    (tmp_path / "bucket" / "reports" / "other").mkdir(parents=True)
    with pytest.raises(ReportError, match="no reports/million-realtime/"):
        fetch(str(tmp_path / "bucket"), "million-realtime", tmp_path / "x")
    hosts = tmp_path / "bucket" / "reports" / "million-realtime"
    (hosts / "checker").mkdir(parents=True)
    assert fetch(str(tmp_path / "bucket"), "million-realtime", tmp_path / "x") == hosts
    with pytest.raises(ReportError, match=r"check\.json: missing; the checker host writes it"):
        build_report(hosts, tmp_path / "out")
    (hosts / "checker" / "check.json").write_text(json.dumps({"hops": []}))
    with pytest.raises(ReportError, match="no emulator-"):
        build_report(hosts, tmp_path / "out")


def test_a_plan_with_a_standby_keeps_checkpoints_and_state_on_shared_storage_and_prices_it(
    tmp_path: Path,
) -> None:
    data = yaml.safe_load(SCALE[0].read_text())
    alone = make_plan(load_spec(SCALE[0]))
    assert not alone.shared_storage and alone.tfvars("x.yaml")["shared_storage"] is False
    data["replicator"]["instances"] = 2
    (tmp_path / "standby.yaml").write_text(yaml.safe_dump(data))
    plan = make_plan(load_spec(tmp_path / "standby.yaml"))
    assert plan.shared_storage and plan.tfvars("x.yaml")["shared_storage"] is True
    assert plan.efs_usd_per_hour > 0
    assert plan.cost_per_hour() == pytest.approx(
        sum(plan.prices[h.instance_type] for h in plan.hosts) + plan.efs_usd_per_hour
    )
    assert any(line.startswith("efs ") for line in plan.table().splitlines())
    addresses = host_addresses(plan)
    shared = Storage("file:///shared/checkpoints", "/shared/state")
    leader, standby = (
        render(h.command, addresses[h.name], addresses, shared) for h in plan.hosts if h.role == "replicator"
    )
    for key in ('"state_store":"/shared/state/', '"checkpoint_store":"file:///shared/checkpoints/'):
        assert leader.split(key)[1].split('"')[0] == standby.split(key)[1].split('"')[0]  # the same folder


def test_the_rehearsal_cuts_the_second_worker_then_kills_the_leader_once_the_worker_is_back() -> None:
    from harness.scale.host_faults import WORKER_CUT_S, fault_times

    spec = load_spec(ROOT / "scenarios" / "scale" / "million-realtime.yaml")  # two workers, a standby
    plan = make_plan(spec)
    t = fault_times(plan, spec)
    assert t.worker == "spark-worker-1" and t.worker_cut_at is not None and t.leader_kill_at is not None
    assert t.leader_kill_at >= t.worker_cut_at + WORKER_CUT_S + 10
    assert '"spark.network.timeout":"30s"' in next(h.command for h in plan.hosts if h.role == "replicator")


def test_every_replicator_application_gets_its_share_of_each_worker() -> None:
    """A warm standby or a second process is an application too: shares over all of them, or
    the first to register holds every core and the others never run a task."""
    import re

    from harness.scale.plan import WORKER_CORES

    for name in ("tiered-tree.yaml", "scale/million-realtime.yaml"):
        spec = load_spec(ROOT / "scenarios" / name)
        plan = make_plan(spec)
        workers = sum(1 for h in plan.hosts if h.role == "spark-worker")
        apps = [h for h in plan.hosts if h.role == "replicator"]
        assert len(apps) == sum(p.instances for p in spec.processes()) > 1
        for h in apps:
            (cores,) = re.findall(r'"spark.executor.cores":"(\d+)"', h.command)
            (most,) = re.findall(r'"spark.cores.max":"(\d+)"', h.command)
            assert int(most) == int(cores) * workers
        assert (
            sum(int(re.findall(r'"spark.executor.cores":"(\d+)"', h.command)[0]) for h in apps)
            <= WORKER_CORES
        )
        assert f"--cores {WORKER_CORES}" in next(h.command for h in plan.hosts if h.role == "spark-worker")
