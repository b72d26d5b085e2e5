"""`python -m harness`: the development harness's commands (scenarios, the JVM class archive)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Development harness of stream-replicator: scenarios on real NATS servers, the JVM archive.",
)
scenario = typer.Typer(no_args_is_help=True, help="Run scenario files on real NATS servers.")
app.add_typer(scenario, name="scenario")
scale = typer.Typer(no_args_is_help=True, help="The EC2 scale test of a scenario (terraform/).")
app.add_typer(scale, name="scale")


def _fail(msg: str) -> None:
    typer.echo(f"harness: {msg}", err=True)
    raise typer.Exit(2)


@scenario.command("run")
def scenario_run(
    files: Annotated[list[Path], typer.Argument(help="Scenario YAML files")],
    report_dir: Annotated[Path, typer.Option(help="Where reports (JSON, PNG, logs) go")] = Path(
        "reports/scenarios"
    ),
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
    failed = []
    for spec in specs:
        report, _ = run_scenario(spec, report_dir)
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
