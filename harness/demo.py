"""`make demo`: two local NATS servers, an emulated fleet, the replicator, a report.

Everything runs embedded: two `nats-server` processes on loopback (source = a data centre,
target = the centre), the fleet emulator filling the source stream with Choria registration
records, and the replicator's Spark job in this process with two streams: a full copy, and a
sampled copy (one record per node per hour, advisories about nodes). Stops by itself once both
have caught up.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import StreamConfig

from emulator.publisher import FleetPublisher
from emulator.scenario import parse_scenario
from emulator.schedule import Schedule
from harness.localnats import local_cluster
from harness.streams import stored_span
from replicator.config import parse_config
from replicator.logs import setup_logging
from replicator.metrics import metrics
from replicator.runner import Runner

STREAM = "CHORIA_REGISTRATION"


def fill(url: str, nodes: int, per_node: int, size: int) -> tuple[int, float]:
    """Publish `per_node` records from each of `nodes` emulated nodes, as fast as they go."""
    interval = 300
    scenario = parse_scenario(
        {
            "name": "demo",
            "seed": 1,
            "speedup": 10_000,  # far faster than one process publishes: a burst
            "duration": interval * per_node,
            "fleet": {"nodes": nodes, "sizes": {"median": size, "min": 1024, "max": max(size, 1024) * 4}},
        }
    )
    pub = FleetPublisher(Schedule(scenario), url, "jetstream", progress=False)
    stats = asyncio.run(pub.run(create_stream=STREAM))
    return stats.published, stats.wall_seconds


async def advisory_stream(url: str) -> None:
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(StreamConfig(name="CHORIA_ADVISORIES", subjects=["choria.advisories.>"]))
    await nc.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5_000)
    ap.add_argument("--records", type=int, default=10, help="records per node")
    ap.add_argument("--size", type=int, default=2048, help="median payload bytes")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    setup_logging("warn")
    work = Path(tempfile.mkdtemp(prefix="sr-demo-"))
    print(f"demo: starting two local nats-servers (work dir {work})")
    with local_cluster(1, "dc1") as source, local_cluster(1, "central") as target:
        published, took = fill(source.url, args.nodes, args.records, args.size)
        asyncio.run(advisory_stream(source.url))
        print(
            f"demo: fleet emulator published {published:,} registration records from {args.nodes:,} nodes "
            f"into {STREAM} on {source.url} ({published / took:,.0f} msg/s)"
        )
        common = {"stream": STREAM, "source_url": source.url, "target_url": target.url}
        cfg = parse_config(
            {
                "name": "demo",
                "state_store": str(work / "state"),
                "streams": [
                    {**common, "name": "copy", "target_stream": "FLEET_REGISTRATION",
                     "target_subject_prefix": "fleet", "target_subject_remove": "choria.stream.input"},
                    {**common, "name": "sampled", "target_stream": "FLEET_SAMPLED",
                     "target_subject_prefix": "sampled", "target_subject_remove": "choria.stream.input",
                     "inspect_field": "sender", "inspect_duration": "1h", "size_trigger": 1024,
                     "inspect_force_field": "force",
                     "advisory": {"subject": "choria.advisories.%s.%v", "reliable": True}},
                ],
            }
        )  # fmt: skip
        runner = Runner(cfg, list(cfg.streams), "local[*]")
        t_start, t_start_wall = time.monotonic(), time.time()
        caught_up: dict[str, float] = {}  # when each entry was first seen caught up
        last_print = [0.0]

        def progress(r: Runner) -> None:
            now = time.monotonic()
            line = []
            for rep in r.replications:
                if rep.sink is None:
                    return
                t = rep.sink.totals
                line.append(f"{rep.s.name}: read {t.received:,} copied {t.copied:,} lag {rep.lag}")
                if t.received >= published and rep.lag == 0:
                    caught_up.setdefault(rep.s.name, now)
            if now - last_print[0] >= 2:
                print("demo: " + " | ".join(line), flush=True)
                last_print[0] = now
            if len(caught_up) == len(r.replications):
                r.request_stop()
            elif now - t_start > args.timeout:
                print("demo: timed out before the target caught up")
                r.request_stop()

        print("demo: starting the replicator (embedded Spark, local[*]): a full copy and a sampled copy")
        runner.run(on_progress=progress)
        print("\n=== stream-replicator demo report ===")
        print(f"source   {STREAM}: {published:,} records from {args.nodes:,} nodes")
        for rep in runner.replications:
            assert rep.sink is not None
            t = rep.sink.totals
            # When the target stored the first and last copies: copies made before the runner
            # reports progress (ahead of the query, while Spark starts) count from the start too.
            span = asyncio.run(stored_span(target.url, rep.s.target_stream))
            first = t_start + (span[0] - t_start_wall) if span is not None else None
            # A full copy ends with its last copy; a sampled one when it was seen caught up (it
            # reads on past its last copy), not when every entry was.
            end = (
                t_start + (span[1] - t_start_wall)
                if span is not None and t.copied == t.received
                else caught_up.get(rep.s.name)
            )
            # A sampled stream may take the whole backlog in one batch: no rate after its first copy.
            pace = (
                f"{t.received / (end - first):,.0f} msg/s after the first copy"
                if end and first and end - first > 0.5
                else "the whole backlog in one batch"
            )
            print(
                f"{rep.s.name:8} -> {rep.s.target_stream}: read {t.received:,}, copied {t.copied:,} "
                f"({t.received / max(1, t.copied):.1f}:1), {t.duplicates} duplicates, final lag {rep.lag}; "
                f"{pace} ({first - t_start if first else float('nan'):.1f} s to the first copy, "
                "JVM and Spark start included)"
            )
        events = {
            s.labels["advisory"]: int(s.value)
            for fam in metrics().advisories.collect()
            for s in fam.samples
            if s.name.endswith("_total")
        }
        print(
            f"advisories on CHORIA_ADVISORIES: {events or 'none'} (the sampled stream saw every node as new)"
        )
    shutil.rmtree(work, ignore_errors=True)
    if len(caught_up) < len(cfg.streams):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
