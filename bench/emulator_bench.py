"""`make bench-emulator`: what one emulator process sustains against a local nats-server.

1. Payload generation alone: the template renderer vs `json.dumps` of the same record, µs each.
2. JetStream-acked publishing (pipelined) of ~1 KB records from a fleet whose schedule asks for
   more than one process can give, so the achieved rate is the sustained maximum.
3. The same with core publishes (no acks), and how many of them the stream stored.
4. Peak RSS of the emulator process holding a 1,000,000-node fleet (runs 2 and 3 use one).
5. The servers' CPU per message stored, beside the emulator's: with `--servers 3` the stream is
   R3 on a 3-server cluster, as a production source is, which shows what the fleet's ingest alone
   takes of the machine before any replicator reads it.
Figures go to stdout and reports/emulator_bench.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
import yaml

from bench.proctree import PeakRSS
from emulator.fleet import build_fleet
from emulator.payload import PayloadFactory
from emulator.scenario import parse_scenario
from harness.localnats import NatsCluster, local_cluster
from harness.proctree import _cpu_ticks


def fleet_scenario(nodes: int, speedup: float, duration: str, subject: str = "bench") -> dict[str, Any]:
    return {
        "name": f"bench-{nodes}",
        "seed": 1,
        "speedup": speedup,
        "duration": duration,
        "fleet": {
            "nodes": nodes,
            "subject": f"{subject}.{{identity}}",
            "sizes": {"median": 1024, "min": 1024, "max": 1024, "sigma": 0},
        },
    }


def render_cost(n: int = 200_000) -> dict[str, float]:
    s = parse_scenario(fleet_scenario(10_000, 1, "1h"))
    f = PayloadFactory(build_fleet(s), 1024)
    t0 = time.perf_counter()
    for i in range(n):
        f.render(i % 10_000, 1024, False, 1_763_840_000, 86_400 + i, i)
    template_us = (time.perf_counter() - t0) / n * 1e6
    records = [json.loads(f.render(i, 1024, False, 1_763_840_000, 86_400 + i, i)) for i in range(1000)]
    t0 = time.perf_counter()
    for i in range(n):
        rec = records[i % 1000]
        rec["time"] = 1_763_840_000 + i
        json.dumps(rec).encode()
    dumps_us = (time.perf_counter() - t0) / n * 1e6
    return {"template_us": round(template_us, 2), "json_dumps_us": round(dumps_us, 2)}


async def stream_count(url: str, stream: str) -> int:
    nc = await nats.connect(url.split(","))
    try:
        return int((await nc.jetstream().stream_info(stream)).state.messages)
    finally:
        await nc.close()


def servers_cpu_s(cluster: NatsCluster) -> float:
    """CPU seconds the cluster's server processes have used so far."""
    return sum(_cpu_ticks(pid) for s in cluster.servers if (pid := s.pid) is not None) / os.sysconf(
        "SC_CLK_TCK"
    )


def run_emulator(
    cluster: NatsCluster, work: Path, mode: str, nodes: int, speedup: float, duration: str
) -> dict[str, Any]:
    url, replicas = cluster.url, len(cluster.servers)
    stream = f"REG_{mode.upper()}"
    scenario = work / f"{mode}.yaml"
    scenario.write_text(yaml.safe_dump(fleet_scenario(nodes, speedup, duration, mode)))
    summary = work / f"{mode}.json"
    cmd = [sys.executable, "-m", "emulator.cli", "run", "--scenario", str(scenario), "--url", url,
           "--mode", mode, "--create-stream", stream, "--replicas", str(replicas),
           "--summary", str(summary)]  # fmt: skip
    servers_before, wall_before = servers_cpu_s(cluster), time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with PeakRSS(proc.pid, interval=0.1) as rss:
        _, err = proc.communicate(timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the emulator's, once reaped
    servers_cpu, wall = servers_cpu_s(cluster) - servers_before, time.monotonic() - wall_before
    if proc.returncode != 0:
        raise SystemExit(f"emulator ({mode}) failed:\n{err[-2000:]}")
    st = json.loads(summary.read_text())
    st["stored"] = asyncio.run(stream_count(url, stream))
    st["peak_rss_mb"] = round(rss.peak / 2**20)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    st["cpu_us_per_msg"] = round(1e6 * cpu / max(1, st["published"]), 1)
    st["servers"] = replicas
    st["servers_cpu_us_per_msg"] = round(1e6 * servers_cpu / max(1, st["stored"]), 1)
    # Of the whole machine over the run (the emulator's start included, as in its own figure).
    st["servers_machine_share"] = round(servers_cpu / (wall * (os.cpu_count() or 1)), 3)
    st["nodes"] = nodes
    st["scheduled_rate"] = round(nodes / 300 * speedup)
    return st


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=15, help="wall seconds of schedule per run")
    ap.add_argument("--demand", type=float, default=60_000, help="scheduled msg/s")
    ap.add_argument(
        "--servers",
        type=int,
        choices=(1, 3),
        default=1,
        help="one server, or 3 with the stream R3 (a source as run)",
    )
    ap.add_argument("--out", default="reports/emulator_bench.json")
    args = ap.parse_args()
    results: dict[str, Any] = {"render": render_cost()}
    print(
        f"payload generation: template {results['render']['template_us']} µs/record, "
        f"json.dumps {results['render']['json_dumps_us']} µs/record"
    )
    # Ask for more than one process can give, so the achieved rate is the ceiling.
    speedup = args.demand / (args.nodes / 300)
    duration = f"{args.seconds * speedup:.0f}s"
    with tempfile.TemporaryDirectory() as d, local_cluster(args.servers, "emubench") as srv:
        for mode in ("jetstream", "core"):
            st = run_emulator(srv, Path(d), mode, args.nodes, speedup, duration)
            results[mode] = st
            print(
                f"{mode:9s}: {st['rate']:>9,.0f} msg/s achieved of {st['scheduled_rate']:,} scheduled "
                f"({st['published']:,} published, {st['stored']:,} stored, {st['failed']} failed) "
                f"| {st['cpu_us_per_msg']} µs of CPU each (start included) | {st['nodes']:,} nodes, "
                f"peak RSS {st['peak_rss_mb']} MB | servers ({st['servers']}): {st['servers_cpu_us_per_msg']} µs "
                f"of CPU a stored message, {st['servers_machine_share']:.0%} of the machine"
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
