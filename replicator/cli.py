"""`stream-replicator` command line."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from replicator.config import Config, ConfigError, StreamConfig, load_config, spark_master_problem

if TYPE_CHECKING:
    from replicator.admin import StateSummary

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Copy NATS JetStream streams between independent clusters, on Apache Spark.",
)

ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="Replicator YAML config (Choria format)")]


def _print_version(value: bool) -> None:
    if value:
        from replicator.version import version_lines

        for line in version_lines():
            typer.echo(line)
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print versions and exit"),
    ] = False,
) -> None:
    """Copy NATS JetStream streams between independent clusters, on Apache Spark."""


def _fail(msg: str) -> NoReturn:
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
    if cfg.heartbeats is not None:
        typer.echo(f"heartbeats: {len(cfg.heartbeats.subjects)} subject(s) every {cfg.heartbeats.interval}")
    for line in cfg.notices():
        typer.echo(f"note: {line}")
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
    if spark_master is not None and (problem := spark_master_problem(spark_master)):
        _fail(f"--spark-master: {problem}")
        return
    from replicator.logs import setup_logging
    from replicator.spark.early_jvm import EarlyJvm
    from replicator.spark.session_args import resolve_master, session_args

    try:
        setup_logging(cfg.loglevel, cfg.logfile, cfg.log_format)
    except OSError as e:
        _fail(
            f"logfile {cfg.logfile}: cannot open it ({e.strerror}): create its folder, fix its permissions, or choose another file"
        )
        return
    for line in cfg.notices():
        logging.getLogger("replicator.config").warning("%s", line)
    # Spark's JVM starts now, beside the rest of the replicator's imports and set-up.
    args = session_args(cfg, streams, resolve_master(cfg, spark_master))
    jvm = EarlyJvm.start(args) if streams else None
    from replicator.runner import Runner

    runner = Runner(cfg, streams, spark_master, jvm=jvm)
    runner.install_stop_signals()
    try:
        code = runner.run()
    except (RuntimeError, OSError, TimeoutError) as e:
        # Setup problems (no target stream, unreachable server): one line, no traceback.
        runner.shutdown()
        runner.ignore_stop_signals()
        _fail(str(e) or type(e).__name__)
        return
    runner.ignore_stop_signals()  # stopped: a Ctrl-C now must not turn its exit status into a kill
    sys.exit(code)


@app.command()
def health(
    config: ConfigOpt,
    ready: Annotated[
        bool, typer.Option(help="Ask /readyz (every stream replicating) instead of /healthz")
    ] = False,
    host: Annotated[
        str | None, typer.Option(help="Where to ask (default: the config's monitor_address, or 127.0.0.1)")
    ] = None,
) -> None:
    """Ask a running replicator's monitor port whether it is alive (exit 0) or not (exit 1):
    for container health checks and service watchdogs."""
    import urllib.error
    import urllib.request

    cfg = _load(config)
    if not cfg.monitor_port:
        _fail(f"{config}: monitor_port is not set: set it to a free port (e.g. 9100) to check health")
    if host is None:
        host = "127.0.0.1" if cfg.monitor_address in ("0.0.0.0", "::") else cfg.monitor_address
    if ":" in host:
        host = f"[{host}]"
    url = f"http://{host}:{cfg.monitor_port}/{'readyz' if ready else 'healthz'}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            typer.echo(f"{url}: {r.status} {r.read().decode(errors='replace').strip()}")
    except urllib.error.HTTPError as e:
        typer.echo(f"{url}: {e.code} {e.read().decode(errors='replace').strip()}", err=True)
        raise typer.Exit(1) from None
    except OSError as e:
        typer.echo(f"{url}: not answering ({getattr(e, 'reason', e)})", err=True)
        raise typer.Exit(1) from None


@app.command("submit-file")
def submit_file() -> None:
    """Print the path of the application file to give spark-submit (then --config FILE)."""
    import importlib.util

    # Found, not imported: replicator.submit imports this module to run.
    spec = importlib.util.find_spec("replicator.submit")
    assert spec is not None and spec.origin is not None
    typer.echo(spec.origin)


admin = typer.Typer(no_args_is_help=True, help="Inspect a replicator's state.")
app.add_typer(admin, name="admin")


def _sampling_states(cfg: Config, stream: str | None) -> Iterator[tuple[StreamConfig, StateSummary]]:
    """Each selected sampled entry with its committed state (all sampled entries by default)."""
    from replicator.admin import read_state

    try:
        streams = [cfg.stream_named(stream)] if stream else [s for s in cfg.streams if s.sampling]
    except ConfigError as e:
        _fail(str(e))
    if not streams or not all(s.sampling for s in streams):
        _fail("no sampling stream selected: state exists only for streams with inspect_field, "
              "inspect_header or inspect_subject_token")  # fmt: skip
    for s in streams:
        try:
            yield s, read_state(cfg, s)
        except RuntimeError as e:
            _fail(str(e))


@admin.command("state")
def admin_state(
    config: ConfigOpt,
    value: Annotated[str | None, typer.Argument(help="Show only this sender")] = None,
    stream: Annotated[str | None, typer.Option(help="Only this stream (its name or stream)")] = None,
    limit: Annotated[int, typer.Option(min=0, help="List at most this many senders")] = 100,
) -> None:
    """List the senders a sampling stream tracks (seen, copied, size, advised) and counts."""
    cfg = _load(config)
    from replicator.admin import format_state

    for s, st in _sampling_states(cfg, stream):
        for line in format_state(s, st, value, limit):
            typer.echo(line)


@admin.command("fleet")
def admin_fleet(
    config: ConfigOpt,
    stream: Annotated[str | None, typer.Option(help="Only this stream (its name or stream)")] = None,
    minutes: Annotated[float, typer.Option(min=0, help="List senders that changed state this recently")] = 60,
    limit: Annotated[int, typer.Option(min=0, help="List at most this many changes")] = 100,
) -> None:
    """The fleet at a glance, from the committed sampling state: senders healthy and in warning,
    and those that became new or timed out in the last --minutes."""
    cfg = _load(config)
    from replicator.admin import format_fleet

    for s, st in _sampling_states(cfg, stream):
        for line in format_fleet(s, st, minutes, limit):
            typer.echo(line)


@admin.command("export-state")
def admin_export_state(
    config: ConfigOpt,
    stream: Annotated[str | None, typer.Option(help="Only this stream (its name or stream)")] = None,
) -> None:
    """Write each sampled stream's committed senders as Choria's replicator keeps them
    (<state_store>/<stream>_<name>.json), for switching a stream back to it: its senders are
    then not advised new or copied again. Stop this replicator first."""
    cfg = _load(config)
    from replicator.sampling.choria_state import ChoriaSender, choria_state_file, write_choria_state

    for s, st in _sampling_states(cfg, stream):
        path = choria_state_file(cfg.state_store, s.stream, s.name)
        write_choria_state(
            path, (ChoriaSender(t.sender, t.seen_ms, t.copied_ms, t.size, t.advised) for t in st.senders)
        )
        typer.echo(f"{s.name}: {len(st.senders)} senders written to {path}")


@admin.command("election")
def admin_election(config: ConfigOpt) -> None:
    """Who leads each leader-elected stream entry now (the CHORIA_LEADER_ELECTION bucket)."""
    import asyncio

    from replicator.admin_nats import election_states, format_election

    cfg = _load(config)
    try:
        states = asyncio.run(election_states(cfg))
    except Exception as e:
        _fail(f"admin election: {e}")
        return
    for line in format_election(states):
        typer.echo(line)


@admin.command("advisories")
def admin_advisories(
    stream: Annotated[str, typer.Argument(help="The stream that stores the advisories")],
    value: Annotated[str | None, typer.Argument(help="Only advisories about this sender")] = None,
    since: Annotated[str, typer.Option(help="How far back, a duration like 5m or 5h")] = "1m",
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new ones")] = False,
    server: Annotated[
        str, typer.Option(envvar="NATS_URL", help="NATS server URL(s), comma separated")
    ] = "nats://127.0.0.1:4222",
) -> None:
    """Search the sampling advisories stored in a stream (io.choria.sr.v2.age_advisory)."""
    import asyncio

    from replicator.admin_nats import stored_advisories
    from replicator.durations import parse_duration

    try:
        age = parse_duration(since)
    except ValueError as e:
        _fail(f"--since {since!r}: {e}")
        return

    async def show() -> None:
        async for line in stored_advisories(server, stream, age, value, follow):
            typer.echo(line)

    try:
        asyncio.run(show())
    except KeyboardInterrupt:
        pass
    except Exception as e:
        _fail(f"admin advisories: {e}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
