"""`make bench`: copy 100,000 x ~1 KB messages between two local servers three ways, in one run.

1. this replicator (the real CLI, embedded Spark), 2. a plain nats-py copier (durable push
consumer, publish_async to the target, source acked after the target ack), 3. NATS's own
cross-server sourcing over a leafnode between two JetStream domains. For each: msgs/s over the
backlog, live latency p50/p99 of a trickle, time from start to first copy, peak RSS of the whole
process tree. Ratios are against the plain copier, measured side by side on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import yaml
from nats.js.api import ExternalStream, StreamConfig, StreamSource

from bench.proctree import CpuSplit, PeakRSS
from harness.faultproxy import FaultProxy
from harness.localnats import free_port, local_cluster

SUBJECTS = "reg.>"


def payload(i: int, size: int) -> bytes:
    body = {"sender": f"node{i % 10_000:05d}.example.net", "i": i}
    body["pad"] = "x" * max(0, size - len(json.dumps(body)) - 10)
    return json.dumps(body).encode()


async def fill(url: str, stream: str, n: int, size: int, subjects: str = SUBJECTS, **kw: Any) -> None:
    nc = await nats.connect(url.split(","))
    js = nc.jetstream(publish_async_max_pending=4000)
    await js.add_stream(StreamConfig(name=stream, subjects=[subjects], allow_direct=True, **kw))
    prefix = subjects.rstrip(">")
    for i in range(n):
        await js.publish_async(f"{prefix}{i % 10_000}", payload(i, size))
    await js.publish_async_completed()
    await nc.close()


async def stream_count(url: str, stream: str) -> int:
    nc = await nats.connect(url.split(","))
    try:
        return int((await nc.jetstream().stream_info(stream)).state.messages)
    except Exception:
        return 0
    finally:
        await nc.close()


def wait_count(url: str, stream: str, n: int, timeout: float, first: list[float]) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c = asyncio.run(stream_count(url, stream))
        if c and not first:
            first.append(time.monotonic())
        if c >= n:
            return time.monotonic()
        time.sleep(0.05)
    raise TimeoutError(f"{stream}: copy did not finish in {timeout}s")


async def trickle_latency(
    src: str, dst: str, pub_subject: str, sub_subject: str, n: int, rate: float
) -> list[float]:
    """Publish n stamped messages at `rate`/s into the source; time their arrival in the target."""
    nsrc, ndst = await nats.connect(src.split(",")), await nats.connect(dst.split(","))
    lat: list[float] = []
    done = asyncio.Event()

    async def on(m: Any) -> None:
        sent = float(json.loads(m.data)["t"])
        lat.append(time.time() - sent)
        if len(lat) >= n:
            done.set()

    await ndst.subscribe(sub_subject, cb=on)
    js = nsrc.jetstream()
    for i in range(n):
        await js.publish(f"{pub_subject}.{i}", json.dumps({"t": time.time(), "pad": "x" * 900}).encode())
        await asyncio.sleep(1 / rate)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), 30)
    await nsrc.close()
    await ndst.close()
    return lat


def pct(xs: list[float], p: float) -> float:
    return statistics.quantiles(xs, n=100)[int(p) - 1] if len(xs) > 2 else float("nan")


# --- 2. the plain nats-py copier, written for the benchmark --------------------------------
PLAIN_COPIER = r"""
import asyncio, sys, nats
from nats.js.api import ConsumerConfig, AckPolicy, DeliverPolicy
async def main(src, dst, stream, tstream):
    s, d = await nats.connect(src), await nats.connect(dst, pending_size=64*1024*1024)
    sjs, djs = s.jetstream(), d.jetstream(publish_async_max_pending=4000)
    q = asyncio.Queue(maxsize=8000)
    async def cb(m):
        await q.put(m)
    await sjs.subscribe("", stream=stream, durable="plain", cb=cb, manual_ack=True,
                        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=8000, flow_control=True, idle_heartbeat=5))
    async def ack_after(fut, m):
        await fut
        await m.ack()
    while True:
        m = await q.get()
        fut = await djs.publish_async("copy." + m.subject, m.data, headers={"Nats-Msg-Id": f"p:{m.metadata.sequence.stream}"})
        asyncio.ensure_future(ack_after(fut, m))
asyncio.run(main(*sys.argv[1:]))
"""


def run_copier(
    label: str,
    cmd: list[str],
    dst: str,
    tstream: str,
    n: int,
    live: Callable[[], list[float]],
    env: dict[str, str] | None = None,
    servers: list[int] | None = None,
) -> dict[str, Any]:
    t0 = time.monotonic()
    first: list[float] = []
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True
    )
    cpu = CpuSplit(proc.pid, servers)
    with PeakRSS(proc.pid) as rss:
        try:
            wait_count(dst, tstream, 1, 900, first)
            cpu.start()  # CPU over the backlog copy, start-up excluded
            end = wait_count(dst, tstream, n, 900, first)
            cpu.stop()
            lat = live()
        finally:
            proc.terminate()
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
    rate = n / (end - first[0]) if end > first[0] else float("nan")
    return {
        "copier": label,
        "msgs_per_s": rate,
        "first_copy_s": first[0] - t0,
        "p50_ms": pct(lat, 50) * 1000,
        "p99_ms": pct(lat, 99) * 1000,
        "rss_mb": rss.peak / 1e6,
        "pss_mb": rss.peak_pss / 1e6,
        "live_received": len(lat),
        "cpu_seconds": cpu.seconds,
        "copy_seconds": end - first[0],
    }


def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (the rounds themselves are kept in the report)."""
    out: dict[str, Any] = {"copier": runs[0]["copier"], "rounds": runs}
    for key in ("msgs_per_s", "first_copy_s", "p50_ms", "p99_ms", "rss_mb", "pss_mb", "live_received"):
        out[key] = statistics.median(r[key] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--live", type=int, default=200, help="trickle messages for latency")
    ap.add_argument("--rounds", type=int, default=3, help="alternated replicator/plain rounds")
    ap.add_argument("--batch-max-messages", type=int, default=0, help="the replicator's cap (0: default)")
    ap.add_argument(
        "--go-binary", default="", help="the Choria stream-replicator binary (v0.9), run beside ours"
    )
    ap.add_argument(
        "--rtt-ms",
        type=float,
        default=0,
        help="also copy through a proxy adding this round trip to the source",
    )
    ap.add_argument(
        "--r3", action="store_true", help="also copy between two 3-server clusters with R3 streams"
    )
    ap.add_argument("--entry", action="append", default=[], metavar="KEY=VALUE",
                    help="a key of ours' stream entry, its value as YAML (e.g. copy_live=false: the query copies)")  # fmt: skip
    ap.add_argument("--out", default="reports/bench.json")
    args = ap.parse_args()
    n, results = args.messages, []
    work = Path(tempfile.mkdtemp(prefix="sr-bench-"))

    def copier_round(
        label: str,
        prefix: str,
        command: Callable[[str, str], list[str]],
        target: str = "BENCH",
        rtt_ms: float = 0,
        via_proxy: bool = False,
        servers: int = 1,
    ) -> dict[str, Any]:
        """One copier over `n` messages between two fresh servers (or two `servers`-server
        clusters whose streams keep that many replicas); `command(source_url, target_url)`
        prepares what it needs and gives the command line that starts it. With `rtt_ms` the
        copier reaches the source through a proxy adding that round trip; with `via_proxy` alone,
        through the proxy without delay (what the proxy's own CPU costs)."""
        with (
            local_cluster(servers, f"{prefix}src") as s,
            local_cluster(servers, f"{prefix}dst") as d,
            FaultProxy(upstream_port=int(s.url.split(",")[0].rsplit(":", 1)[1])) as proxy,
        ):
            proxy.latency = rtt_ms / 2000  # each way
            asyncio.run(fill(s.url, "BENCH", n, args.size, num_replicas=servers))
            if servers > 1:
                label += f", R{servers} clusters"
            if rtt_ms:
                label += f", {rtt_ms:.0f} ms round trip to the source"
            elif via_proxy:
                label += ", through the proxy without delay"
            return run_copier(
                label,
                command(proxy.url if rtt_ms or via_proxy else s.url, d.url),
                d.url,
                target,
                n,
                lambda: asyncio.run(
                    trickle_latency(s.url, d.url, "reg.live", "copy.reg.live.>", args.live, 20)
                ),
                servers=[srv.proc.pid for srv in (*s.servers, *d.servers) if srv.proc],
            )

    def config_file(name: str, src: str, dst: str, **extra: Any) -> Path:
        """The same YAML for ours and the Go original (its keys are Choria's)."""
        stream = {"stream": "BENCH", "source_url": src, "target_url": dst, "target_subject_prefix": "copy"}
        cfg = work / f"{name}.yaml"
        cfg.write_text(yaml.safe_dump({"name": "bench", "state_store": str(work / f"state-{name}"),
                                       "streams": [{**stream, **extra}]}))  # fmt: skip
        return cfg

    def replicator_round(
        r: int, rtt_ms: float = 0, via_proxy: bool = False, servers: int = 1
    ) -> dict[str, Any]:
        extra = {"batch_max_messages": args.batch_max_messages} if args.batch_max_messages else {}
        extra.update({k: yaml.safe_load(v) for k, v in (e.split("=", 1) for e in args.entry)})
        name = f"sr-{r}-{rtt_ms:.0f}{'-proxy' if via_proxy else ''}-{servers}"
        return copier_round(
            "stream-replicator (Spark local[*])",
            "b",
            lambda s, d: [sys.executable, "-m", "replicator.cli", "run", "--config", str(config_file(name, s, d, **extra))],
            rtt_ms=rtt_ms,
            via_proxy=via_proxy,
            servers=servers,
        )  # fmt: skip

    def plain_round(r: int) -> dict[str, Any]:
        def command(s: str, d: str) -> list[str]:
            asyncio.run(fill(d, "TARGET", 0, args.size, subjects="copy.reg.>"))
            script = work / "plain_copier.py"
            script.write_text(PLAIN_COPIER)
            return [sys.executable, str(script), s, d, "BENCH", "TARGET"]

        return copier_round("plain nats-py copier", "p", command, target="TARGET")

    def go_round(r: int, target_initiated: bool, rtt_ms: float = 0, servers: int = 1) -> dict[str, Any]:
        """The Go original (its own placement, or target_initiated: reading through a consumer
        the target side creates, which it runs only with a filter_subject)."""
        mode = "target_initiated" if target_initiated else "default"
        extra = {"target_initiated": True, "filter_subject": SUBJECTS} if target_initiated else {}
        return copier_round(
            f"Choria stream-replicator (Go, {mode})",
            "g",
            lambda s, d: [args.go_binary, "replicate", "--config", str(config_file(f"go-{mode}-{r}-{rtt_ms:.0f}-{servers}", s, d, **extra))],
            rtt_ms=rtt_ms,
            servers=servers,
        )  # fmt: skip

    def native_round(r: int, servers: int = 1) -> dict[str, Any]:
        """NATS's own copy: a target stream in JetStream domain B that `sources` the source
        stream in domain A across a leafnode (each target server a leaf of every source
        server), on single servers or on `servers`-server clusters with R`servers` streams."""
        leaf_ports = [free_port() for _ in range(servers)]
        remotes = ", ".join(f'"nats-leaf://127.0.0.1:{p}"' for p in leaf_ports)
        with (
            local_cluster(servers, "lsrc", js_domain="A", extra=lambda i: f"leafnodes {{ host: 127.0.0.1, port: {leaf_ports[i]} }}") as s,
            local_cluster(servers, "ldst", js_domain="B", extra=f"leafnodes {{ remotes: [ {{ urls: [{remotes}] }} ] }}") as d,
        ):  # fmt: skip
            asyncio.run(fill(s.url, "BENCH", n, args.size, num_replicas=servers))
            time.sleep(1)

            async def add_sourced() -> None:
                nc = await nats.connect(d.url.split(","))
                await nc.jetstream().add_stream(
                    StreamConfig(
                        name="SOURCED",
                        subjects=["copy.reg.>"],
                        num_replicas=servers,
                        sources=[StreamSource(name="BENCH", external=ExternalStream(api="$JS.A.API"))],
                    )
                )
                await nc.close()

            pids = [srv.proc.pid for srv in (*s.servers, *d.servers) if srv.proc]
            cpu = CpuSplit(pids[0], pids[1:])
            t0 = time.monotonic()
            first: list[float] = []
            cpu.start()
            asyncio.run(add_sourced())
            with PeakRSS(d.servers[0].proc.pid, interval=0.02) as rss:  # type: ignore[union-attr]
                end = wait_count(d.url, "SOURCED", n, 600, first)
            cpu.stop()
        # Sourcing can finish within a few polls: rate over the whole time from stream creation.
        return {
            "copier": "NATS leafnode sourcing (domains A->B)"
            + (f", R{servers} clusters" if servers > 1 else ""),
            "msgs_per_s": n / (end - t0),
            "first_copy_s": first[0] - t0,
            "p50_ms": float("nan"),
            "p99_ms": float("nan"),
            "rss_mb": rss.peak / 1e6,
            "pss_mb": rss.peak_pss / 1e6,
            "live_received": 0,
            "cpu_seconds": cpu.seconds,
            "copy_seconds": end - t0,
        }

    def median_of_rounds(one_round: Callable[[int], dict[str, Any]]) -> None:
        runs = [one_round(i) for i in range(args.rounds)]
        results.append(_median_of(runs))
        print(
            f"{runs[0]['copier']}: " + ", ".join(f"{g['msgs_per_s']:,.0f}" for g in runs) + " msg/s",
            flush=True,
        )

    # 1 and 2, alternated round by round: on a shared, noisy machine a single pair of runs can
    # differ by 2x; the medians of several alternated rounds are what the ratio is taken from.
    rounds: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for i in range(args.rounds):
        ours, plain = replicator_round(i), plain_round(i)
        rounds.append((ours, plain))
        print(
            f"round {i + 1}/{args.rounds}: stream-replicator {ours['msgs_per_s']:,.0f} msg/s, "
            f"plain copier {plain['msgs_per_s']:,.0f} msg/s ({ours['msgs_per_s'] / plain['msgs_per_s']:.2f}x)",
            flush=True,
        )
    results.append(_median_of([o for o, _ in rounds]))
    results.append(_median_of([p for _, p in rounds]))
    if args.go_binary:
        median_of_rounds(lambda i: go_round(i, False))
        median_of_rounds(lambda i: go_round(i, True))
    else:
        print("Go replicator: not given (--go-binary PATH or make bench GO_REPLICATOR=PATH), so not measured")
    if args.rtt_ms:
        # Ours, and the Go original placed near the target, with the source far away; and ours
        # through the proxy without delay: on 2 cores the proxy's own CPU slows the copier too.
        median_of_rounds(lambda i: replicator_round(i, 0, via_proxy=True))
        median_of_rounds(lambda i: replicator_round(i, args.rtt_ms))
        if args.go_binary:
            median_of_rounds(lambda i: go_round(i, True, args.rtt_ms))

    # 3. NATS sourcing over a leafnode between JetStream domains A (source) and B (target);
    # then, with --r3, ours, NATS's and the Go original's between two 3-server clusters with R3
    # streams on both sides, alternated round by round.
    median_of_rounds(lambda i: native_round(i))
    if args.r3:
        r3_rounds: dict[str, list[dict[str, Any]]] = {"ours": [], "native": [], "go": []}
        for i in range(args.rounds):
            r3_rounds["ours"].append(replicator_round(i, servers=3))
            r3_rounds["native"].append(native_round(i, servers=3))
            if args.go_binary:
                r3_rounds["go"].append(go_round(i, True, servers=3))
            print(
                f"R3 round {i + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]['msgs_per_s']:,.0f}" for k, v in r3_rounds.items() if v) + " msg/s",
                flush=True,
            )  # fmt: skip
        results.extend(_median_of(v) for v in r3_rounds.values() if v)

    base = next(r for r in results if r["copier"].startswith("plain"))["msgs_per_s"]
    print(
        f"\n{n:,} messages x {args.size} B, two local nats-servers; live trickle {args.live} msgs at 20/s; "
        f"medians of {args.rounds} alternated rounds\n"
    )
    print(
        f"{'copier':48} {'msg/s':>9} {'x plain':>8} {'1st copy s':>10} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'RSS MB':>7} {'PSS MB':>7}"
    )
    for r in results:
        r["ratio_vs_plain"] = r["msgs_per_s"] / base
        print(
            f"{r['copier']:48} {r['msgs_per_s']:9,.0f} {r['ratio_vs_plain']:8.2f} {r['first_copy_s']:10.1f} "
            f"{r['p50_ms']:7.0f} {r['p99_ms']:7.0f} {r['rss_mb']:7.0f} {r['pss_mb']:7.0f}"
        )
    print("\nCPU per message copied (µs), over the last round's copy, by kind of process:")
    for r in (r for r in results if "rounds" in r):
        last = r["rounds"][-1]
        # JVM: <thread> rows split the JVM's own total (JIT, GC, other), they do not add to it.
        busy = sum(v for k, v in last["cpu_seconds"].items() if not k.startswith("JVM: "))
        split = ", ".join(f"{k} {v / n * 1e6:.0f}" for k, v in last["cpu_seconds"].items() if v >= 0.05)
        r["cpu_us_per_message"] = {k: v / n * 1e6 for k, v in last["cpu_seconds"].items()}
        print(
            f"  {r['copier']}: {busy / n * 1e6:.0f} in all ({last['copy_seconds']:.1f} s, "
            f"{busy / last['copy_seconds'] / (os.cpu_count() or 1):.0%} of {os.cpu_count()} cores): {split}"
        )
    ours = results[0]
    checks = [
        ("throughput >= 1.0x plain", ours["ratio_vs_plain"] >= 1.0),
        ("p50 live <= 300 ms", ours["p50_ms"] <= 300),
        ("p99 live <= 1 s", ours["p99_ms"] <= 1000),
        ("memory <= 1.5 GB (peak PSS)", ours["pss_mb"] <= 1500),
        ("memory <= 1.5 GB (peak summed RSS)", ours["rss_mb"] <= 1500),
        ("first copy <= 15 s", ours["first_copy_s"] <= 15),
    ]

    def row(*words: str) -> dict[str, Any] | None:
        """The first result whose copier's name holds every word (None: not measured)."""
        return next((r for r in results if all(w in r["copier"] for w in words)), None)

    def ratio(
        key: str, mine: dict[str, Any] | None, other: dict[str, Any] | None, what: str, target: float
    ) -> None:
        """Two rows' rates compared: printed, kept in the report, checked against issue 17's target."""
        if mine is None or other is None:
            return
        ours[key] = mine["msgs_per_s"] / other["msgs_per_s"]
        print(f"{what}: {ours[key]:.2f}x")
        checks.append((f"{what} >= {target}x", ours[key] >= target))

    print()
    far, go_ti = f"{args.rtt_ms:.0f} ms", "target_initiated"
    ratio("ratio_vs_go_target_initiated", ours, row(go_ti), "ours / Go target_initiated", 3)
    ratio(
        "ratio_far_vs_loopback",
        row("stream-replicator", "round trip"),
        ours,
        f"ours {far} from the source / ours on loopback",
        0.9,
    )
    near = row("stream-replicator", "without delay")
    if near is not None and (far_row := row("stream-replicator", "round trip")) is not None:
        # No target of its own: the round trip's cost alone, the proxy's CPU taken out.
        ours["ratio_far_vs_proxy"] = far_row["msgs_per_s"] / near["msgs_per_s"]
        print(
            f"ours {far} from the source / ours through the proxy without delay: {ours['ratio_far_vs_proxy']:.2f}x"
        )
    ratio(
        "ratio_far_vs_go_far",
        row("stream-replicator", "round trip"),
        row(go_ti, "round trip"),
        f"both {far} from the source, ours / Go target_initiated",
        2,
    )
    # Issue 32's anchor: NATS's own sourcing, single servers and R3 clusters.
    ratio("ratio_vs_native", ours, row("leafnode sourcing"), "ours / NATS sourcing, single servers", 1.0)
    ratio(
        "ratio_vs_native_r3",
        row("stream-replicator", "R3"),
        row("leafnode sourcing", "R3"),
        "ours / NATS sourcing, R3 clusters",
        1.5,
    )
    print("\ntargets: " + ", ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in checks))
    print("(RSS sums count shared pages once per process; PSS counts each page once: bench/proctree.py)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()
