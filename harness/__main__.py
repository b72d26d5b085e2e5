"""`python -m harness`: the development harness's commands (scenarios, the JVM class archive)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from harness.scenario.truth import Report

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Development harness of stream-replicator: scenarios on real NATS servers, the JVM archive.",
)
scenario = typer.Typer(no_args_is_help=True, help="Run scenario files on real NATS servers.")
app.add_typer(scenario, name="scenario")
scale = typer.Typer(no_args_is_help=True, help="The EC2 scale test of a scenario (terraform/).")
app.add_typer(scale, name="scale")


def _stop_cleanly_on_sigterm() -> None:
    """SIGTERM (timeout, CI, kill) unwinds like Ctrl-C: the servers and processes a run started
    are stopped and their folders removed, not left running."""
    import signal
    import sys

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def _print_report(report: Report, where: str) -> None:
    """A scale test's report and where its files are; exit 1 when a check failed."""
    typer.echo(report.table())
    typer.echo(where)
    if not report.ok:
        raise typer.Exit(1)


def _fail(msg: str) -> None:
    typer.echo(f"harness: {msg}", err=True)
    raise typer.Exit(2)


class ReplicatorLogLevel(enum.StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


@scenario.command("run")
def scenario_run(
    files: Annotated[list[Path], typer.Argument(help="Scenario YAML files")],
    report_dir: Annotated[Path, typer.Option(help="Where reports (JSON, PNG, logs) go")] = Path(
        "reports/scenarios"
    ),
    replicator_loglevel: Annotated[
        ReplicatorLogLevel,
        typer.Option(
            help="The replicators' loglevel: debug logs where each batch's time went "
            "(summed by `python -m bench.batch_times LOG`)"
        ),
    ] = ReplicatorLogLevel.info,
) -> None:
    """Run scenarios: fleet + outages + replicator, checked against the ground truth."""
    from emulator.scenario import ScenarioError
    from harness.scenario.runner import run_scenario
    from harness.scenario.spec import load_spec
    from replicator.logs import setup_logging

    try:
        specs = [load_spec(f) for f in files]
    except ScenarioError as e:
        _fail(str(e))
        return
    setup_logging("info")
    _stop_cleanly_on_sigterm()
    failed = []
    for spec in specs:
        report, _ = run_scenario(spec, report_dir, replicator_loglevel.value)
        typer.echo(report.table())
        if not report.ok:
            failed.append(spec.scenario.name)
    typer.echo(
        f"{len(specs) - len(failed)} passed, {len(failed)} failed"
        + (f": {', '.join(failed)}" if failed else "")
    )
    if failed:
        raise typer.Exit(1)


@scale.command("plan")
def scale_plan(
    file: Annotated[Path, typer.Argument(help="Scenario YAML file")],
    out: Annotated[Path, typer.Option(help="Where terraform.tfvars.json and hosts.json go")] = Path(
        "terraform"
    ),
    locust_users: Annotated[
        int,
        typer.Option(min=0, help="Add locust hosts with this many users publishing as extra nodes (0: none)"),
    ] = 0,
) -> None:
    """Print the hosts, rates, data and cost of a scenario's EC2 run; write terraform's
    variables and every host's command."""
    from emulator.scenario import ScenarioError
    from harness.scale.plan import make_plan, write_plan
    from harness.scenario.spec import load_spec

    try:
        plan = make_plan(load_spec(file), locust_users=locust_users)
    except (ScenarioError, ValueError) as e:
        _fail(str(e))
        return
    typer.echo(plan.table())
    relative = Path("..") / file if not file.is_absolute() else file
    for path in write_plan(plan, out, str(relative)):
        typer.echo(f"wrote {path}")


def _named_urls(option: str, values: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in values:
        name, sep, url = v.partition("=")
        if not sep or not name or not url:
            _fail(f"{option} {v!r}: give NAME=URL")
        out.setdefault(name, []).append(url)
    return out


@scale.command("check")
def scale_check(
    file: Annotated[Path, typer.Argument(help="Scenario YAML file")],
    cluster: Annotated[list[str], typer.Option(help="NAME=URLS of each cluster of the scenario's topology")],
    metrics: Annotated[list[str], typer.Option(help="NAME=URL: a replicator's /metrics (once per instance)")],
    out: Annotated[Path, typer.Option(help="Where check.json goes")] = Path("reports"),
    quiet: Annotated[
        float, typer.Option(min=1, help="Seconds the fleet's streams must hold still once it is done")
    ] = 15.0,
) -> None:
    """The scale test's checker host: make the advisory streams, watch the run, check it
    against the ground truth, write check.json (make scale-report reads it)."""
    from emulator.scenario import ScenarioError
    from harness.scale.check import run_check
    from harness.scenario.spec import load_spec
    from replicator.logs import setup_logging

    try:
        spec = load_spec(file)
    except ScenarioError as e:
        _fail(str(e))
        return
    urls = {name: ",".join(u) for name, u in _named_urls("--cluster", cluster).items()}
    setup_logging("info")
    try:
        path = run_check(spec, urls, _named_urls("--metrics", metrics), out, quiet_s=quiet)
    except (ValueError, RuntimeError) as e:
        _fail(str(e))
        return
    typer.echo(f"wrote {path}")


@scale.command("report")
def scale_report(
    bucket: Annotated[
        str, typer.Argument(help="The test's bucket (NAME or s3://NAME) or a local copy of it")
    ],
    scenario_name: Annotated[str, typer.Argument(help="The scenario's name (its `name:`)")],
    out: Annotated[Path, typer.Option(help="Where the report (JSON, PNG) and fetched files go")] = Path(
        "reports/scale"
    ),
) -> None:
    """Gather the hosts' reports of a scale test into the scenario runner's report."""
    from harness.scale.report import ReportError, build_report, fetch

    try:
        hosts = fetch(bucket, scenario_name, out / "hosts")
        report = build_report(hosts, out)
    except ReportError as e:
        _fail(str(e))
        return
    _print_report(report, f"report: {out / (scenario_name + '.json')}, {out / (scenario_name + '.png')}")


@scale.command("rehearse")
def scale_rehearse(
    file: Annotated[Path, typer.Argument(help="Scenario YAML file")],
    nodes: Annotated[int, typer.Option(min=1, help="The fleet's nodes in the rehearsal")] = 3000,
    duration: Annotated[
        float, typer.Option(min=10, help="The rehearsal's duration, seconds of scenario time")
    ] = 150.0,
    work: Annotated[Path, typer.Option(help="The hosts' folders, the bucket and the report")] = Path(
        "reports/rehearsal"
    ),
    locust_users: Annotated[int, typer.Option(min=0, help="Locust users, as in scale plan")] = 0,
) -> None:
    """Run a scenario's EC2 plan on this machine, scaled down: each host's own command on a
    host of its own (a network namespace, as root; else a loopback address); then the report,
    as make scale-report makes it."""
    from emulator.scenario import ScenarioError
    from harness.scale.rehearse import RehearsalError, rehearse
    from harness.scale.report import ReportError
    from replicator.logs import setup_logging

    setup_logging("info")
    _stop_cleanly_on_sigterm()
    try:
        report, bucket = rehearse(file, work, nodes, duration, locust_users)
    except (ScenarioError, ValueError, RehearsalError, ReportError) as e:
        _fail(str(e))
        return
    _print_report(report, f"hosts: {work / 'hosts'}; bucket: {bucket}; report: {work / 'report'}")


@app.command("chaos")
def chaos(
    seeds: Annotated[str, typer.Option(help="Seeds to run: 7, 1-50 or 3,9,12")] = "1-50",
    faults: Annotated[int, typer.Option(min=1, help="Faults in each seed's schedule")] = 5,
    out: Annotated[Path, typer.Option(help="Each schedule's logs and the results")] = Path("reports/chaos"),
) -> None:
    """The fault campaign: each seed's schedule of faults on 3+3 clustered nats-servers (R3
    streams), two elected replicators and a fleet, on hosts that are network namespaces
    (root); then every copy, advisory and publisher checked. Exit 1 if any seed failed."""
    from harness.chaos.campaign import markdown_summary, run_campaign, summary
    from harness.netns import LabUnavailable
    from replicator.logs import setup_logging

    try:
        chosen = _seed_list(seeds)
    except ValueError:
        _fail(f"--seeds {seeds!r} is not a list of seeds: give e.g. 7, 1-50 or 3,9,12")
        return
    setup_logging("info")
    _stop_cleanly_on_sigterm()
    try:
        results = run_campaign(chosen, faults, out)
    except LabUnavailable as e:
        _fail(str(e))
        return
    table = summary(results)
    (out / "summary.txt").write_text(table + "\n")
    (out / "summary.md").write_text(markdown_summary(results) + "\n")
    typer.echo(table)
    if not all(r.ok for r in results):
        raise typer.Exit(1)


def _seed_list(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        seeds += list(range(int(low), int(high or low) + 1))
    if not seeds:
        raise ValueError(text)
    return seeds


@app.command("jvm-archive")
def jvm_archive(
    force: Annotated[bool, typer.Option(help="Build it again even if one exists")] = False,
) -> None:
    """Build the Spark driver's class archive (the JVM starts ~4 s faster; `make install` runs this)."""
    from replicator.logs import setup_logging
    from replicator.spark.jvm import archive_path

    existing = archive_path()
    if existing is not None and existing.is_file() and not force:
        typer.echo(f"class archive {existing}: already built")
        return
    setup_logging("warn")
    from harness.jvm_archive import build_class_archive

    try:
        archive = build_class_archive()
    except (RuntimeError, OSError, TimeoutError) as e:
        _fail(str(e))
        return
    typer.echo(f"class archive {archive}: built ({archive.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    app()
