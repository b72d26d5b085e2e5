"""`make demo`: two local NATS servers, a filled source stream, the replicator, a report.

Everything runs embedded: two `nats-server` processes on loopback (source = a data centre,
target = the centre), a source stream filled with Choria-shaped registration records, and the
replicator's Spark job in this process. Stops by itself once the target has caught up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import StreamConfig

from replicator.config import parse_config
from replicator.localnats import local_cluster
from replicator.logs import setup_logging
from replicator.runner import Runner


def registration_record(node: int, dc: str, size: int) -> bytes:
    sender = f"node{node:06d}.{dc}.example.net"
    body = {
        "protocol": "choria:registration:inventorycontent:1",
        "sender": sender,
        "time": int(time.time()),
        "data": {"agents": ["rpcutil", "package", "service"], "classes": ["roles::web"], "facts": {}},
    }
    pad = max(0, size - len(json.dumps(body)))
    body["data"]["facts"] = {"padding": "x" * pad}  # type: ignore[index]
    return json.dumps(body).encode()


async def fill(url: str, messages: int, nodes: int, size: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=4000)
    await js.add_stream(
        StreamConfig(
            name="CHORIA_REGISTRATION", subjects=["choria.stream.input.registration.>"], allow_direct=True
        )
    )
    templates = [registration_record(n, "dc1", size) for n in range(min(nodes, 1000))]
    t0 = time.monotonic()
    for i in range(messages):
        node = i % nodes
        await js.publish_async(
            f"choria.stream.input.registration.node{node:06d}.dc1.example.net",
            templates[node % len(templates)],
        )
    await js.publish_async_completed()
    took = time.monotonic() - t0
    await nc.close()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--nodes", type=int, default=5_000)
    ap.add_argument("--size", type=int, default=1024, help="payload bytes")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    setup_logging("warn")
    work = Path(tempfile.mkdtemp(prefix="sr-demo-"))
    print(f"demo: starting two local nats-servers (work dir {work})")
    with local_cluster(1, "dc1") as source, local_cluster(1, "central") as target:
        took = asyncio.run(fill(source.url, args.messages, args.nodes, args.size))
        print(
            f"demo: source stream CHORIA_REGISTRATION on {source.url}: {args.messages:,} records "
            f"from {args.nodes:,} nodes ({args.messages / took:,.0f} msg/s published)"
        )
        cfg = parse_config(
            {
                "name": "demo",
                "state_store": str(work / "state"),
                "streams": [
                    {
                        "name": "registration",
                        "stream": "CHORIA_REGISTRATION",
                        "source_url": source.url,
                        "target_url": target.url,
                        "target_stream": "FLEET_REGISTRATION",
                        "target_subject_prefix": "fleet",
                        "target_subject_remove": "choria.stream.input",
                    }
                ],
            }
        )
        runner = Runner(cfg, list(cfg.streams), "local[*]")
        rep = runner.replications[0]
        t_start = time.monotonic()
        first_copy: list[float] = []
        caught_up: list[float] = []
        last_print = [0.0]
        last_lag: list[int | None] = [None]

        def progress(r: Runner) -> None:
            sink = rep.sink
            if sink is None:
                return
            copied = sink.totals.copied
            if copied and not first_copy:
                first_copy.append(time.monotonic())
            lag = rep.lag  # the runner refreshed it just before calling us
            last_lag[0] = lag
            now = time.monotonic()
            if now - last_print[0] >= 2:
                print(f"demo: copied {copied:,}  lag {lag if lag is not None else '?'}", flush=True)
                last_print[0] = now
            if copied >= args.messages and lag == 0:
                caught_up.append(now)
                r.request_stop()
            elif now - t_start > args.timeout:
                print("demo: timed out before the target caught up")
                r.request_stop()

        print("demo: starting the replicator (embedded Spark, local[*])")
        runner.run(on_progress=progress)
        sink = rep.sink
        assert sink is not None
        tot = sink.totals
        print("\n=== stream-replicator demo report ===")
        print(f"source            CHORIA_REGISTRATION  {args.messages:,} messages, {args.size} B each")
        print(f"target            FLEET_REGISTRATION   {tot.copied:,} copied, {tot.duplicates} duplicates")
        if first_copy:
            print(f"time to 1st copy  {first_copy[0] - t_start:.1f} s (includes JVM and Spark start)")
        if first_copy and caught_up and caught_up[0] > first_copy[0]:
            rate = tot.copied / (caught_up[0] - first_copy[0])
            print(
                f"copy rate         {rate:,.0f} msg/s ({rate * args.size / 1e6:.1f} MB/s) after the first copy"
            )
        print(f"final lag         {last_lag[0]} messages")
    shutil.rmtree(work, ignore_errors=True)
    if not caught_up:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
