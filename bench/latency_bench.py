"""`make bench` (latency): how long a copy takes to land once the replicator has caught up.

    .venv/bin/python -m bench.latency_bench [--go-binary PATH] [--trickle 3000] [--rate 100]
        [--idle-seconds 20] [--spark-conf KEY=VALUE ...] [--sampled] [--entry KEY=VALUE ...] [--busy N]

For each replicator (ours; the Go Choria replicator too when its binary is given), on two fresh
local nats-servers: a warm-up, then a trickle of `--trickle` 1 KB messages at `--rate`/s, then a
backlog of `--backlog` messages published at once while the trickle goes on. The latency of a
copy is its timestamp in the target minus the source timestamp its Choria-SR-Source header
carries (both stamped by the servers, on this machine's clock). Printed: p50/p99/max on the
trickle and for the trickle's messages while the backlog drains, the drain's time, whether the
target holds every source message once and in order, the CPU the copier and both servers spend
while nothing is published (after the warm-up, for `--idle-seconds`), and, for ours, where a
batch's time goes (Spark's steps, from the replicator's own /metrics). `--busy N` runs N
processes that spin on a core through the trickle and the drain (not the idle measure), each in
a session of its own, as another service on the machine would be: with the kernel's autogroup
scheduling (on by default on most distributions) the CPU is shared between sessions first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats
import yaml
from nats.js.api import StreamConfig

from bench.proctree import CpuSplit
from harness.localnats import free_port, local_cluster
from harness.process import ReplicatorProcess
from harness.scrape import batch_steps
from harness.streams import count_messages, read_all
from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.wire import first_value

STREAM = "LIVE"
PAD = "x" * 960


async def _create_streams(src: str, dst: str, replicas: int = 1) -> None:
    for url in (src, dst):
        nc = await nats.connect(url.split(","))  # a cluster: its servers, comma-separated
        try:
            await nc.jetstream().add_stream(
                StreamConfig(name=STREAM, subjects=["reg.>"], allow_direct=True, num_replicas=replicas)
            )
        finally:
            await nc.close()


async def _trickle(url: str, kind: str, n: int, rate: float, stop: asyncio.Event | None = None) -> int:
    """Publish up to `n` messages on reg.<kind>.<i> at `rate`/s on a fixed schedule (a late
    message does not push the next ones back); stops early once `stop` is set."""
    nc = await nats.connect(url.split(","))  # a cluster: its servers, comma-separated
    js = nc.jetstream()
    t0 = time.monotonic()
    sent = 0
    try:
        for i in range(n):
            if stop is not None and stop.is_set():
                break
            await js.publish(
                f"reg.{kind}.{i}", json.dumps({"i": i, "sender": f"{kind}-{i}", "pad": PAD}).encode()
            )
            sent += 1
            await asyncio.sleep(max(0.0, t0 + (i + 1) / rate - time.monotonic()))
    finally:
        await nc.close()
    return sent


async def _burst(url: str, n: int) -> None:
    nc = await nats.connect(url.split(","))  # a cluster: its servers, comma-separated
    js = nc.jetstream(publish_async_max_pending=4000)
    try:
        for i in range(n):
            await js.publish_async(
                f"reg.bulk.{i}", json.dumps({"i": i, "sender": f"bulk-{i}", "pad": PAD}).encode()
            )
        await js.publish_async_completed()
    finally:
        await nc.close()


def _wait_for(url: str, n: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if asyncio.run(count_messages(url, STREAM)) >= n:
            return time.monotonic()
        time.sleep(0.05)
    raise TimeoutError(f"the target did not reach {n} messages within {timeout:.0f}s")


async def _drain_phase(src: str, dst: str, backlog: int, rate: float, expect: int) -> tuple[int, float]:
    """The backlog published at once while the trickle goes on; returns the trickle's count and
    the seconds from the backlog's first publish until its last copy landed."""
    stop = asyncio.Event()
    trickle = asyncio.create_task(_trickle(src, "drain", 10**9, rate, stop))
    t0 = time.monotonic()
    await _burst(src, backlog)
    end = await asyncio.to_thread(_wait_for, dst, expect + backlog, 900)
    await asyncio.sleep(1.0)  # a last second of trickle after the drain
    stop.set()
    return await trickle, end - t0


def latencies_ms(messages: list[Any]) -> dict[str, list[float]]:
    """Per kind of message (reg.<kind>.<i>), each copy's latency in ms."""
    by_kind: dict[str, list[float]] = {}
    for m in messages:
        mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
        if mark is None:
            continue
        kind = m.subject.split(".")[1]
        by_kind.setdefault(kind, []).append(m.ts_ns / 1e6 - mark.timestamp_ms)
    return by_kind


def order_check(messages: list[Any], published: int) -> str:
    """'intact' when the target holds source sequences 1..published once each, in order."""
    seqs = [
        mark.sequence
        for m in messages
        if (mark := parse_source_header(first_value(m.headers, SOURCE_HEADER)))
    ]
    if seqs == list(range(1, published + 1)):
        return "intact"
    return f"BROKEN: {len(seqs)} copies of {published}, {len(seqs) - len(set(seqs))} duplicated"


def summary(xs: list[float]) -> dict[str, float]:
    if len(xs) < 2:
        return {"n": len(xs), "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    q = statistics.quantiles(xs, n=100)
    return {"n": len(xs), "p50": q[49], "p99": q[98], "max": max(xs)}


def _ours(spark_conf: dict[str, str], sampled: bool = False, extra: dict[str, Any] | None = None) -> Any:
    @contextmanager
    def copier(src: str, dst: str, work: Path) -> Iterator[tuple[str | None, int]]:
        cfg = work / "ours.yaml"
        port = free_port()
        entry: dict[str, Any] = {"stream": STREAM, "source_url": src, "target_url": dst}
        if sampled:
            # Every message is a new sender's ("<kind>-<i>"), so every one is copied (as first seen).
            entry.update(inspect_field="sender", inspect_duration="1h")
        entry.update(extra or {})
        cfg.write_text(yaml.safe_dump({"name": "lat", "state_store": str(work / "ours-state"), "monitor_port": port,
                                       "spark_conf": spark_conf, "streams": [entry]}))  # fmt: skip
        rep = ReplicatorProcess(cfg, work / "ours.log").start()
        try:
            assert rep.proc is not None
            yield rep.metrics_url, rep.proc.pid
        finally:
            rep.stop()

    return copier


@contextmanager
def _go(binary: str, src: str, dst: str, work: Path) -> Iterator[tuple[str | None, int]]:
    cfg = work / "go.yaml"
    cfg.write_text(yaml.safe_dump({"name": "lat", "state_store": str(work / "go-state"),
                                   "streams": [{"stream": STREAM, "source_url": src, "target_url": dst}]}))  # fmt: skip
    with (work / "go.log").open("w") as log:
        proc = subprocess.Popen([binary, "replicate", "--config", str(cfg)], stdout=log, stderr=log)
    try:
        yield None, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


BUSY_LOOP = "while True: pass"


@contextmanager
def busy_cores(n: int) -> Iterator[None]:
    """`n` processes spinning on a core meanwhile, each in a session of its own."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run_one(label: str, copier: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    with local_cluster(args.servers, "latsrc") as s, local_cluster(args.servers, "latdst") as d:
        asyncio.run(_create_streams(s.url, d.url, args.servers))
        with copier(s.url, d.url, work) as (metrics_url, pid):
            warm = 200
            asyncio.run(_trickle(s.url, "warm", warm, 50))
            _wait_for(d.url, warm, 300)
            # Caught up, nothing published: what waiting for the next message costs.
            cpu = CpuSplit(pid, [srv.proc.pid for srv in (*s.servers, *d.servers) if srv.proc])
            cpu.start()
            time.sleep(args.idle_seconds)
            idle = {k: v / args.idle_seconds for k, v in cpu.stop().items() if not k.startswith("JVM: ")}
            with busy_cores(args.busy):
                before = batch_steps(metrics_url) if metrics_url else {}
                asyncio.run(_trickle(s.url, "trickle", args.trickle, args.rate))
                _wait_for(d.url, warm + args.trickle, 120)
                after = batch_steps(metrics_url) if metrics_url else {}
                drained, drain_s = asyncio.run(
                    _drain_phase(s.url, d.url, args.backlog, args.rate, warm + args.trickle)
                )
            total = warm + args.trickle + args.backlog + drained
            _wait_for(d.url, total, 120)
        copies = asyncio.run(read_all(d.url, STREAM))
    lat = latencies_ms(copies)
    steps = {
        k: (after[k][0] - before.get(k, (0.0, 0.0))[0]) / n * 1000
        for k in after
        if (n := after[k][1] - before.get(k, (0.0, 0.0))[1]) > 0
    }
    batches = after.get("triggerExecution", (0.0, 0.0))[1] - before.get("triggerExecution", (0.0, 0.0))[1]
    return {
        "copier": label,
        "trickle": summary(lat.get("trickle", [])),
        "drain": summary(lat.get("drain", [])),
        "drain_seconds": drain_s,
        "order": order_check(copies, total),
        "steps_ms": steps,
        "trickle_batches": batches,
        "idle_cpu_share": idle,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--go-binary", default="", help="the Choria stream-replicator binary (v0.9), run beside ours"
    )
    ap.add_argument("--trickle", type=int, default=3000, help="messages in the trickle")
    ap.add_argument("--rate", type=float, default=100, help="trickle messages per second")
    ap.add_argument("--backlog", type=int, default=100_000, help="messages published at once, drained live")
    ap.add_argument(
        "--idle-seconds", type=float, default=20, help="caught up and idle: CPU measured this long"
    )
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="ours' spark_conf")
    ap.add_argument(
        "--sampled", action="store_true", help="ours samples (every message a new sender's, so all copied)"
    )
    ap.add_argument("--entry", action="append", default=[], metavar="KEY=VALUE",
                    help="a key of ours' stream entry, its value as YAML (e.g. sampling_buckets=8)")  # fmt: skip
    ap.add_argument(
        "--busy", type=int, default=0, metavar="N",
        help="N processes spinning on a core through the trickle and the drain (a busy machine)",
    )  # fmt: skip
    ap.add_argument(
        "--servers", type=int, choices=(1, 3), default=1,
        help="NATS servers in each of the source and target clusters (3: R3 streams on both)",
    )  # fmt: skip
    ap.add_argument("--out", default="reports/latency.json")
    args = ap.parse_args()
    spark_conf = dict(kv.split("=", 1) for kv in args.spark_conf)
    extra = {k: yaml.safe_load(v) for k, v in (e.split("=", 1) for e in args.entry)}
    work = Path(tempfile.mkdtemp(prefix="sr-latency-"))
    label = "stream-replicator (sampled)" if args.sampled else "stream-replicator"
    runs = [run_one(label, _ours(spark_conf, args.sampled, extra), args, work)]
    if args.go_binary:
        runs.append(
            run_one("Choria stream-replicator (Go)", lambda s, d, w: _go(args.go_binary, s, d, w), args, work)
        )
    else:
        print("Go replicator: not given (--go-binary PATH), so not measured")
    busy = f"; {args.busy} busy-looping processes beside" if args.busy else ""
    busy += "; 3-server clusters, R3 streams" if args.servers == 3 else ""
    print(
        f"\nlatency of a copy (target timestamp - source timestamp), ms; trickle {args.trickle} x 1 KB at "
        f"{args.rate:.0f}/s; drain: the trickle's copies while {args.backlog:,} published at once drain{busy}\n"
    )
    print(
        f"{'replicator':32} {'p50':>6} {'p99':>6} {'max':>6}   {'drain p50':>9} {'p99':>7} {'max':>7} {'drain s':>8}  order"
    )
    for r in runs:
        t, dr = r["trickle"], r["drain"]
        print(
            f"{r['copier']:32} {t['p50']:6.1f} {t['p99']:6.1f} {t['max']:6.1f}   {dr['p50']:9.0f} {dr['p99']:7.0f} "
            f"{dr['max']:7.0f} {r['drain_seconds']:8.1f}  {r['order']}"
        )
    print(f"\nCPU while caught up and idle for {args.idle_seconds:.0f} s, share of one core:")
    for r in runs:
        idle = r["idle_cpu_share"]
        print(
            f"  {r['copier']:32} {sum(idle.values()):6.1%}  ("
            + ", ".join(f"{k} {v:.1%}" for k, v in idle.items())
            + ")"
        )
    ours = runs[0]
    if ours["steps_ms"]:
        order = ["latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets"]
        shown = [k for k in order if k in ours["steps_ms"]] + ["triggerExecution"]
        print(
            f"\nours, mean ms per batch over the trickle's {ours['trickle_batches']:.0f} batches (Spark's steps):"
        )
        print("  " + ", ".join(f"{k} {ours['steps_ms'].get(k, 0):.1f}" for k in shown))
    checks = [
        ("trickle p50 <= 15 ms (issue 32)", ours["trickle"]["p50"] <= 15),
        ("trickle p99 <= 30 ms (issue 32)", ours["trickle"]["p99"] <= 30),
        ("every copy once and in order", all(r["order"] == "intact" for r in runs)),
    ]
    print("\ntargets: " + ", ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in checks))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=2))
    print(f"\nreport: {args.out}")


if __name__ == "__main__":
    main()
