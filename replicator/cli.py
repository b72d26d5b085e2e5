"""`stream-replicator` command line."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from replicator.config import Config, ConfigError, load_config

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Copy NATS JetStream streams between independent clusters, on Apache Spark.",
)

ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="Replicator YAML config (Choria format)")]


def _fail(msg: str) -> None:
    typer.echo(f"stream-replicator: {msg}", err=True)
    raise typer.Exit(2)


def _load(path: Path) -> Config:
    try:
        return load_config(path)
    except ConfigError as e:
        _fail(str(e))
        raise AssertionError from None  # unreachable


@app.command()
def validate(config: ConfigOpt) -> None:
    """Check a config file without connecting to anything."""
    cfg = _load(config)
    for s in cfg.streams:
        mode = "sampling" if s.sampling else "copy"
        typer.echo(f"{s.name}: {s.stream} -> {s.target_stream} ({mode})")
    typer.echo(f"{config}: ok ({len(cfg.streams)} stream{'s' if len(cfg.streams) != 1 else ''})")


@app.command()
def run(
    config: ConfigOpt,
    stream: Annotated[str | None, typer.Option(help="Run only this stream (its name or stream)")] = None,
    spark_master: Annotated[
        str | None, typer.Option("--spark-master", help="Spark master URL, e.g. spark://host:7077")
    ] = None,
) -> None:
    """Replicate every configured stream (or one) until SIGINT/SIGTERM."""
    cfg = _load(config)
    try:
        streams = [cfg.stream_named(stream)] if stream else list(cfg.streams)
    except ConfigError as e:
        _fail(str(e))
        return
    from replicator.logs import setup_logging
    from replicator.runner import Runner

    setup_logging(cfg.loglevel, cfg.logfile)
    runner = Runner(cfg, streams, spark_master)
    signal.signal(signal.SIGTERM, runner.request_stop)
    signal.signal(signal.SIGINT, runner.request_stop)
    try:
        code = runner.run()
    except (RuntimeError, OSError, TimeoutError) as e:
        # Setup problems (no target stream, unreachable server): one line, no traceback.
        runner.shutdown()
        _fail(str(e) or type(e).__name__)
        return
    sys.exit(code)


@app.command("jvm-archive")
def jvm_archive(
    force: Annotated[bool, typer.Option(help="Build it again even if one exists")] = False,
) -> None:
    """Build the Spark driver's class archive (starts ~4 s faster; `make install` runs this)."""
    from replicator.logs import setup_logging
    from replicator.spark.jvm import archive_path

    existing = archive_path()
    if existing is not None and existing.is_file() and not force:
        typer.echo(f"class archive {existing}: already built")
        return
    setup_logging("warn")
    from replicator.classarchive import build_class_archive

    try:
        archive = build_class_archive()
    except (RuntimeError, OSError, TimeoutError) as e:
        _fail(str(e))
        return
    typer.echo(f"class archive {archive}: built ({archive.stat().st_size / 1e6:.0f} MB)")


admin = typer.Typer(no_args_is_help=True, help="Inspect a replicator's state.")
app.add_typer(admin, name="admin")


@admin.command("state")
def admin_state(
    config: ConfigOpt,
    value: Annotated[str | None, typer.Argument(help="Show only this sender")] = None,
    stream: Annotated[str | None, typer.Option(help="Only this stream (its name or stream)")] = None,
    limit: Annotated[int, typer.Option(min=0, help="List at most this many senders")] = 100,
) -> None:
    """List the senders a sampling stream tracks (seen, copied, size, advised) and counts."""
    cfg = _load(config)
    try:
        streams = [cfg.stream_named(stream)] if stream else [s for s in cfg.streams if s.sampling]
    except ConfigError as e:
        _fail(str(e))
        return
    if not streams or not all(s.sampling for s in streams):
        _fail("no sampling stream selected: state exists only for streams with inspect_field, "
              "inspect_header or inspect_subject_token")  # fmt: skip
    from replicator.admin import format_state, read_state

    for s in streams:
        try:
            st = read_state(cfg, s)
        except RuntimeError as e:
            _fail(str(e))
            return
        for line in format_state(s, st, value, limit):
            typer.echo(line)


scenario = typer.Typer(no_args_is_help=True, help="Run scenario files on real NATS servers.")
app.add_typer(scenario, name="scenario")


@scenario.command("run")
def scenario_run(
    files: Annotated[list[Path], typer.Argument(help="Scenario YAML files")],
    report_dir: Annotated[Path, typer.Option(help="Where reports (JSON, PNG, logs) go")] = Path(
        "reports/scenarios"
    ),
) -> None:
    """Run scenarios: fleet + outages + replicator, checked against the ground truth."""
    from emulator.scenario import ScenarioError
    from replicator.logs import setup_logging
    from replicator.scenario.runner import run_scenario
    from replicator.scenario.spec import load_spec

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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
