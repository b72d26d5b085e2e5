"""terraform/ checked without a terraform binary (none can be fetched here): every file
parses, every variable is declared and used, every module gets exactly inputs it declares,
checkov passes, and the plan of each shipped scale scenario renders to the same bytes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import hcl2
import pytest

from harness.scale.plan import make_plan, write_plan
from harness.scenario.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
TF = ROOT / "terraform"
MODULE_DIRS = [TF, *sorted(p for p in (TF / "modules").iterdir() if p.is_dir())]
SCALE_SCENARIOS = sorted((ROOT / "scenarios" / "scale").glob("*.yaml"))


def _unquoted(value: Any) -> Any:
    """python-hcl2 8 keeps the quotes of names and strings."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _block(body: dict[str, Any]) -> dict[str, Any]:
    return {k: _unquoted(v) for k, v in body.items() if not k.startswith("__")}


def _parsed(directory: Path) -> dict[str, list[Any]]:
    merged: dict[str, list[Any]] = {}
    for f in sorted(directory.glob("*.tf")):
        with f.open() as fh:
            for key, blocks in hcl2.load(fh).items():
                merged.setdefault(key, []).extend(blocks)
    return merged


def _variables(directory: Path) -> dict[str, dict[str, Any]]:
    return {
        _unquoted(name): _block(body)
        for block in _parsed(directory).get("variable", [])
        for name, body in block.items()
    }


def _text(directory: Path) -> str:
    return "\n".join(f.read_text() for f in sorted(directory.glob("*.tf")))


@pytest.mark.parametrize("directory", MODULE_DIRS, ids=lambda p: p.name)
def test_every_file_parses_and_every_variable_is_declared_described_and_used(directory: Path) -> None:
    declared = _variables(directory)
    text = _text(directory)
    used = set(re.findall(r"\bvar\.([A-Za-z_][A-Za-z0-9_]*)", text))
    assert used - set(declared) == set(), f"{directory.name}: used but not declared"
    assert set(declared) - used == set(), f"{directory.name}: declared but never used"
    for name, body in declared.items():
        assert body.get("description"), f"{directory.name}: variable {name} has no description"


def test_every_module_call_gives_declared_inputs_and_all_required_ones() -> None:
    calls = [(d, block) for d in MODULE_DIRS for block in _parsed(d).get("module", [])]
    assert calls
    for directory, block in calls:
        for name, raw in block.items():
            body = _block(raw)
            source = (directory / body["source"]).resolve()
            declared = _variables(source)
            given = {
                k
                for k in body
                if k not in ("source", "version", "providers", "depends_on", "count", "for_each")
            }
            assert given - set(declared) == set(), f"module {name}: inputs it does not declare"
            required = {k for k, v in declared.items() if "default" not in v}
            assert required - given == set(), f"module {name}: required inputs not given"


def test_the_user_data_template_gets_every_value_it_uses() -> None:
    template = (TF / "templates" / "user_data.sh.tftpl").read_text()
    # ${name} and %{ for ... in name } are terraform's; $${...} is a literal for bash.
    used = set(re.findall(r"(?<!\$)\$\{([a-z_]+)\}", template)) | set(
        re.findall(r"%\{ for \w+, \w+ in (\w+)", template)
    )
    loops = set(re.findall(r"%\{ for (\w+), (\w+) in", template))
    loop_names = {n for pair in loops for n in pair}
    call = (TF / "modules" / "hosts" / "main.tf").read_text()
    given = set(re.findall(r"^\s+(\w+)\s+=", call.split("templatefile(", 1)[1].split("})", 1)[0], re.M))
    assert used - loop_names <= given, used - loop_names - given


@pytest.mark.parametrize("path", SCALE_SCENARIOS, ids=lambda p: p.stem)
def test_the_plan_of_each_scale_scenario_renders_the_same_bytes_and_fits_the_variables(
    path: Path, tmp_path: Path
) -> None:
    outputs = []
    for run in ("a", "b"):
        files = write_plan(make_plan(load_spec(path)), tmp_path / run, f"../scenarios/scale/{path.name}")
        outputs.append([f.read_bytes() for f in files])
    assert outputs[0] == outputs[1]
    tfvars = json.loads(outputs[0][0])
    root = _variables(TF)
    assert set(tfvars) <= set(root), set(tfvars) - set(root)
    host_fields = set(re.findall(r"(\w+)\s*=", root["hosts"]["type"].split("object(", 1)[1]))
    for name, host in tfvars["hosts"].items():
        assert set(host) == host_fields, name
        for other in re.findall(r"\{host:([A-Za-z0-9_-]+)\}", host["command"]):
            assert other in tfvars["hosts"], f"{name} names a host the plan does not have: {other}"
    assert len({h["address_index"] for h in tfvars["hosts"].values()}) == len(tfvars["hosts"])


def test_checkov_finds_nothing_and_every_skip_gives_its_reason() -> None:
    checkov = shutil.which("checkov", path=str(Path(sys.executable).parent.parent / "checkov" / "bin"))
    assert checkov, "checkov is installed by `make install` into .venv/checkov (see the Makefile)"
    for f in TF.rglob("*.tf"):
        for skip in re.findall(r"#checkov:skip=(.*)", f.read_text()):
            check, _, reason = skip.partition(":")
            assert re.fullmatch(r"CKV2?_AWS_\d+", check) and len(reason.split()) >= 4, f"{f}: {skip}"
    out = subprocess.run(
        [checkov, "-d", str(TF), "--framework", "terraform", "--output", "json", "--quiet", "--compact"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(out.stdout)
    reports = report if isinstance(report, list) else [report]
    failed = [c for r in reports for c in r.get("results", {}).get("failed_checks", [])]
    summary = [r.get("summary", {}) for r in reports]
    assert failed == [], [(c["check_id"], c["resource"], c["file_path"]) for c in failed]
    assert sum(s.get("passed", 0) for s in summary) > 0, out.stdout[-2000:]


def test_locust_hosts_join_the_plan_when_asked_and_their_load_is_counted(tmp_path: Path) -> None:
    spec = load_spec(SCALE_SCENARIOS[0])
    without, with_locust = make_plan(spec), make_plan(spec, locust_users=5_000)
    added = {h.name: h for h in with_locust.hosts}.keys() - {h.name for h in without.hosts}
    assert sorted(added) == ["locust-master", "locust-worker-0", "locust-worker-1", "locust-worker-2"]
    hosts = {h.name: h for h in with_locust.hosts}
    master = hosts["locust-master"].command
    assert "--master" in master and "--expect-workers 3" in master and "-u 5000" in master
    assert "-f loadtests/locustfile.py" in master and "METRICS_URL=http://{host:replicator-" in master
    assert "--master-host {host:locust-master}" in hosts["locust-worker-0"].command
    for h in with_locust.hosts:
        for other in re.findall(r"\{host:([A-Za-z0-9_-]+)\}", h.command):
            assert other in hosts, f"{h.name} names a host the plan does not have: {other}"
    # 5,000 more nodes at the scenario's speedup, into the first data centre's stream.
    extra = 5_000 * spec.scenario.speedup / spec.scenario.fleet.interval
    source = max(with_locust.streams, key=lambda s: s.msgs_per_s)  # the data centre's stream
    before = next(s for s in without.streams if (s.cluster, s.stream) == (source.cluster, source.stream))
    assert source.msgs_per_s == pytest.approx(before.msgs_per_s + extra)
    assert with_locust.cost_per_hour() > without.cost_per_hour()
    files = write_plan(with_locust, tmp_path, "../scenarios/scale/x.yaml")
    assert "locust-worker-2" in json.loads(files[0].read_text())["hosts"]
