"""A sampled batch's copies read back from the source and published, as when every sender falls
due at once (`steady-100k`'s third minute): the sampling sink's step after the rules, without
Spark, against real servers (an R3 source cluster of 3 and a single target, as in the scenario).

    .venv/bin/python -m bench.sampled_copies_bench [--messages 100000] [--copies-per-batch 10000]
        [--rounds 3] [--every 1] [--root DIR ...]

The source holds `--messages` ~1.5 KB registrations. Each round copies all of them, cut into
batches of `--copies-per-batch` decided copies (the rows the rules hand the sink), into a fresh
target stream, in a process of its own. Each `--root` is a checkout whose `replicator` that
process imports (this file is run as a script, so nothing of this checkout's code comes with
it): the roots alternate within every round, and each line gives a root's copies per second,
its process's CPU and the servers' per copy, and the ratio to the first root's in the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def worker(src: str, dst: str, target: str, times_file: str, per_batch: int) -> None:
    """One round, in its own process: the copies of every (sequence, time) in `times_file`,
    published batch by batch through the root's SamplingSink."""
    import pyarrow as pa

    from replicator.aio import LoopThread
    from replicator.options import ReaderOptions
    from replicator.sampling.rules import SamplingParams
    from replicator.source_reader import SourceReader
    from replicator.spark.sampling import KIND_COPY, KIND_STATS, SamplingSink
    from replicator.spark.sink import OrderedSink, SinkSettings

    # The columns of the rules' rows that the sink reads (replicator.spark.sampling.OUTPUT_SCHEMA).
    rows_schema = pa.schema(
        [("kind", pa.string()), ("seq", pa.int64()), ("ts_ms", pa.int64()), ("event", pa.string()),
         ("size", pa.int64()), ("warned", pa.int32()), ("unkeyed", pa.int32()), ("forced", pa.int32()),
         ("received", pa.int32()), ("received_bytes", pa.int64()), ("due_ms", pa.int64())]
    )  # fmt: skip
    pairs = json.loads(Path(times_file).read_text())
    loop = LoopThread()
    # Each round's target stream holds its own subjects (t<round>_<root>.reg.>).
    settings = SinkSettings(dst, target, "FLEET", "bench", "cfg", f"bench.cfg.{target}.1", target.lower())
    sink = SamplingSink(
        OrderedSink(settings, loop),
        loop,
        SourceReader(ReaderOptions(url=src, stream="FLEET")),
        SamplingParams(inspect_ms=3_600_000, warn_ms=1_800_000, stream="FLEET"),
    )
    copied, wall, cpu = 0, 0.0, 0.0
    try:
        for n in range(0, len(pairs), per_batch):
            part = pairs[n : n + per_batch]
            rows: list[dict[str, Any]] = [
                {"kind": KIND_COPY, "seq": q, "ts_ms": t, "size": size} for q, t, size in part
            ]
            rows.append({"kind": KIND_STATS, "seq": part[-1][0], "ts_ms": part[-1][1], "size": len(part),
                         "warned": 0, "unkeyed": 0, "forced": 0, "received": len(part),
                         "received_bytes": sum(p[2] for p in part)})  # fmt: skip
            table = pa.Table.from_pylist(rows, rows_schema)
            t0, c0 = time.monotonic(), time.process_time()
            sink.publish_decided(table, n // per_batch, t0)
            wall += time.monotonic() - t0
            cpu += time.process_time() - c0
            copied += len(part)
    finally:
        sink.close()
        loop.stop()
    print(json.dumps({"copied": copied, "wall_s": wall, "cpu_s": cpu}))


async def _fill(url: str, n: int) -> list[tuple[int, int, int]]:
    """`n` ~1.5 KB registrations in an R3 stream FLEET; each one's (sequence, time in ms, size)."""
    from bench.copy_bench import fill
    from harness.streams import read_all

    await fill(url, "FLEET", n, 1500, "reg.>", num_replicas=3)
    return [(m.seq, m.ts_ns // 1_000_000, len(m.data)) for m in await read_all(url, "FLEET")]


async def _target(url: str, name: str) -> None:
    import nats
    from nats.js.api import StreamConfig

    nc = await nats.connect(url)
    try:
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    finally:
        await nc.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--copies-per-batch", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--every",
        type=int,
        default=1,
        help="copy one message in this many (1: every one, as in the wave; 12: a fleet's steady state)",
    )
    ap.add_argument("--root", action="append", default=[], help="a checkout to run (repeat to compare)")
    args = ap.parse_args()
    roots = [Path(r).resolve() for r in args.root] or [HERE.parents[1]]
    for r in roots:
        if not (r / "replicator" / "spark" / "sampling.py").exists():
            sys.exit(f"sampled copies bench: {r} is not a checkout of stream-replicator; give --root DIR")
    if len(set(roots)) < len(roots):
        sys.exit("sampled copies bench: a --root is given twice; give each checkout once")
    sys.path.insert(0, str(HERE.parents[1]))
    from bench.copy_bench import stream_count
    from bench.proctree import CpuSplit
    from harness.localnats import local_cluster

    results: dict[Path, list[dict[str, float]]] = {r: [] for r in roots}
    with local_cluster(3, "src") as s, local_cluster(1, "dst") as d, tempfile.TemporaryDirectory() as work:
        if args.every < 1:
            sys.exit("sampled copies bench: --every must be 1 or more (one copy in that many messages)")
        pairs = asyncio.run(_fill(s.url, args.messages))[:: args.every]
        times_file = Path(work) / "times.json"
        times_file.write_text(json.dumps(pairs))
        servers = [srv.proc.pid for srv in (*s.servers, *d.servers) if srv.proc]
        for n in range(1, args.rounds + 1):
            for root in roots:
                target = f"T{n}_{roots.index(root)}"
                asyncio.run(_target(d.url, target))
                cpu = CpuSplit(servers[0], servers[1:])
                cpu.start()
                code = (f"import sys; sys.path[:0] = [{str(root)!r}, {str(HERE.parent)!r}]; "
                        f"from sampled_copies_bench import worker; "
                        f"worker({s.url!r}, {d.url!r}, {target!r}, {str(times_file)!r}, {args.copies_per_batch})")  # fmt: skip
                env = {**os.environ, "PYTHONPATH": str(root)}
                out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                                     text=True, check=False)  # fmt: skip
                if out.returncode != 0:
                    sys.exit(f"sampled copies bench: the round from {root} failed:\n{out.stderr[-3000:]}")
                run = json.loads(out.stdout.strip().splitlines()[-1])
                run["servers_s"] = sum(cpu.stop().values())
                stored = asyncio.run(stream_count(d.url, target))
                if stored != len(pairs):
                    sys.exit(
                        f"sampled copies bench: the target holds {stored} copies of {len(pairs)} from {root}"
                    )
                results[root].append(run)
                base = results[roots[0]][-1]
                rate = run["copied"] / run["wall_s"]
                ratio = (base["wall_s"] / run["wall_s"]) if root != roots[0] else 1.0
                print(f"round {n} {root}: {rate:,.0f} copies/s, CPU µs per copy: process "
                      f"{1e6 * run['cpu_s'] / run['copied']:.1f}, servers {1e6 * run['servers_s'] / run['copied']:.1f}"
                      + (f"  [{ratio:.2f}x the rate of {roots[0].name}]" if root != roots[0] else ""),
                      flush=True)  # fmt: skip
    for root in roots:
        rates = [r["copied"] / r["wall_s"] for r in results[root]]
        print(f"median {root}: {statistics.median(rates):,.0f} copies/s")


if __name__ == "__main__":
    main()
