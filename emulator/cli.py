"""`fleet-emulator`: plan a fleet's publishes, or publish them into a NATS server."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Literal

import typer

from emulator.scenario import Scenario, ScenarioError, load_scenario
from emulator.schedule import Shard

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Emulate a fleet of Choria nodes publishing registration data, with outages, reproducibly.",
)

ScenarioOpt = Annotated[Path, typer.Option("--scenario", "-s", help="Scenario YAML (fleet, events, clock)")]
ShardOpt = Annotated[str, typer.Option(help="This process's part of the fleet, i/N (0-based)")]
DataCentreOpt = Annotated[
    list[str] | None,
    typer.Option("--data-centre", help="Publish only this data centre's nodes (repeatable)"),
]
SeedOpt = Annotated[int | None, typer.Option(help="Override the scenario's seed")]
SpeedupOpt = Annotated[float | None, typer.Option(help="Override the scenario's speedup")]
DurationOpt = Annotated[str | None, typer.Option(help="Override the scenario's duration (e.g. 10m)")]


def _fail(msg: str) -> None:
    typer.echo(f"fleet-emulator: {msg}", err=True)
    raise typer.Exit(2)


SEED_MAX = 2**64 - 1  # numpy's generators take a seed of at most 64 bits here


def _load(path: Path, seed: int | None, speedup: float | None, duration: str | None) -> Scenario:
    if seed is not None and not 0 <= seed <= SEED_MAX:
        _fail(f"--seed {seed}: give a number from 0 to {SEED_MAX}")
    try:
        return load_scenario(path).with_overrides(seed, speedup, duration)
    except ScenarioError as e:
        _fail(str(e))
        raise AssertionError from None  # unreachable


def _shard(text: str, data_centres: list[str] | None = None) -> Shard:
    try:
        return replace(Shard.parse(text), data_centres=tuple(data_centres or ()))
    except ValueError as e:
        _fail(str(e))
        raise AssertionError from None


@app.command()
def plan(
    scenario: ScenarioOpt,
    out: Annotated[Path | None, typer.Option(help="Write the plan CSV here (default: stdout)")] = None,
    shard: ShardOpt = "0/1",
    data_centre: DataCentreOpt = None,
    seed: SeedOpt = None,
    speedup: SpeedupOpt = None,
    duration: DurationOpt = None,
) -> None:
    """Write the expected publish log (t,node,size,force), without a server."""
    from emulator.planlog import write_plan
    from emulator.schedule import Schedule

    s = _load(scenario, seed, speedup, duration)
    part = _shard(shard, data_centre)
    try:
        # Every check of the arguments against the scenario (the shard, --data-centre, the
        # events' node names) before --out is opened: a refusal leaves a file there as it was.
        sched = Schedule(s, part)
    except ValueError as e:
        _fail(str(e))
        return
    try:
        if out is None:
            n = write_plan(sched, sys.stdout)
        else:
            with out.open("w") as f:
                n = write_plan(sched, f)
    except OSError as e:
        _fail(f"--out {out}: cannot write it ({e.strerror}): give the path of a file in a folder that exists")
        return
    typer.echo(f"{s.name}: {n:,} publishes planned over {s.duration:,.0f}s", err=True)


@app.command()
def run(
    scenario: ScenarioOpt,
    url: Annotated[str, typer.Option(help="NATS server URL(s), comma separated")] = "nats://127.0.0.1:4222",
    mode: Annotated[
        str, typer.Option(help="jetstream (acknowledged, pipelined) or core (fire and forget)")
    ] = "jetstream",
    log: Annotated[Path | None, typer.Option("--log", help="Write what was published (CSV) here")] = None,
    create_stream: Annotated[
        str | None, typer.Option(help="Create this stream for the fleet's subjects if it is missing")
    ] = None,
    replicas: Annotated[
        int, typer.Option(min=1, max=5, help="Copies of each message in the stream --create-stream makes")
    ] = 1,
    summary: Annotated[Path | None, typer.Option(help="Write the run summary (JSON) here")] = None,
    shard: ShardOpt = "0/1",
    data_centre: DataCentreOpt = None,
    seed: SeedOpt = None,
    speedup: SpeedupOpt = None,
    duration: DurationOpt = None,
    max_pending: Annotated[int, typer.Option(min=1, help="JetStream publishes in flight")] = 8000,
) -> None:
    """Publish the fleet's registration data into NATS on schedule, until the scenario ends."""
    from emulator.publisher import FleetPublisher
    from emulator.schedule import Schedule

    if mode not in ("jetstream", "core"):
        _fail(f"--mode {mode!r}: use jetstream or core")
    s = _load(scenario, seed, speedup, duration)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    m: Literal["jetstream", "core"] = "core" if mode == "core" else "jetstream"
    try:
        pub = FleetPublisher(Schedule(s, _shard(shard, data_centre)), url, m, log, max_pending=max_pending)
    except ValueError as e:
        _fail(str(e))
        return

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, pub.stop)
        await pub.run(create_stream, replicas)

    try:
        asyncio.run(main())
    except (OSError, ValueError, TimeoutError) as e:
        _fail(f"{url}: {e}")
    except Exception as e:
        if type(e).__module__.startswith("nats"):
            _fail(f"{url}: {type(e).__name__}: {e}")
        raise
    st = pub.stats
    typer.echo(
        f"{s.name}: published {st.published:,} of {st.scheduled:,} scheduled ({st.mode}) in "
        f"{st.wall_seconds:.1f}s = {st.rate:,.0f} msg/s, max behind {st.max_behind_seconds:.2f}s, "
        f"republished {st.republished}, failed {st.failed}",
        err=True,
    )
    if summary:
        summary.write_text(json.dumps(st.as_dict(), indent=2))
    if st.failed:
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
