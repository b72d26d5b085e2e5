"""Sampling throughput (part of `make bench`): messages per second the replicator reads,
decides and publishes (copies and reliable advisories) with sampling on, against the plain
nats-py copier on the same 100,000 messages in the same run.

For each sender count the source holds `senders + measured` ~1 KB messages: first one from each
sender (all new: copied and advised), then `--measured` (100,000) more spread over the same
senders, which are measured, so the rate is taken with the whole sender table in Spark's state.
The rate is read from the replicator's own `total_messages` counter; the CPU each kind of process
spent per measured message is printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
import yaml
from nats.js.api import StreamConfig

from bench.copy_bench import PLAIN_COPIER, fill, run_copier
from bench.proctree import CpuSplit, PeakRSS
from harness.localnats import free_port, local_cluster
from harness.process import ReplicatorProcess
from harness.scrape import scrape

MEASURED = 100_000


async def fill_senders(url: str, senders: int, extra: int, size: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=8000)
    await js.add_stream(StreamConfig(name="FLEET", subjects=["reg.>"], allow_direct=True))
    await js.add_stream(StreamConfig(name="ADV", subjects=["adv.>"]))
    pad = "x" * size
    for i in range(senders + extra):
        node = i % senders
        body = f'{{"sender":"node{node:07d}.example.net","i":{i},"pad":"{pad}"}}'.encode()[: size + 60]
        await js.publish_async(f"reg.{node % 1000}", body)
    await js.publish_async_completed()
    await nc.close()


def run_sampling(
    src: str,
    dst: str,
    work: Path,
    total: int,
    senders: int,
    batch: int,
    measured: int = MEASURED,
    spark_conf: dict[str, str] | None = None,
    entry: dict[str, Any] | None = None,
) -> dict[str, Any]:
    port = free_port()
    cfg = work / f"sampling-{senders}.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "name": "bench",
                "state_store": str(work / f"state-{senders}"),
                "monitor_port": port,
                "spark_conf": spark_conf or {},
                "streams": [
                    {
                        "stream": "FLEET",
                        "source_url": src,
                        "target_url": dst,
                        "target_subject_prefix": "copy",
                        "inspect_field": "sender",
                        "batch_max_messages": batch,
                        "inspect_duration": "1h",
                        "advisory": {"subject": "adv.%s.%v", "reliable": True},
                        **(entry or {}),
                    }
                ],
            }
        )
    )
    rep = ReplicatorProcess(cfg, work / f"sampling-{senders}.log").start(wait=False)
    assert rep.proc is not None
    proc = rep.proc
    url = rep.metrics_url
    start_at = total - measured
    t_first = t_start = t_end = 0.0
    cpu, new_cpu = CpuSplit(proc.pid), CpuSplit(proc.pid)
    try:
        with PeakRSS(proc.pid) as rss:
            deadline = time.monotonic() + 3600
            while time.monotonic() < deadline:
                try:
                    got = scrape(url)["received"]
                except OSError:
                    got = 0
                now = time.monotonic()
                if not t_first and got:
                    # The first batch is done: the rest of the senders' first messages (each a
                    # copy and a `new` advisory) are measured from here.
                    t_first, first_got = now, got
                    new_cpu.start()
                if not t_start and got >= start_at:
                    t_start, base = now, got
                    new_cpu.stop()
                    cpu.start()
                if got >= total:
                    t_end = now
                    cpu.stop()
                    break
                if proc.poll() is not None:
                    raise SystemExit("replicator exited during the sampling bench")
                time.sleep(0.2)
            final = scrape(url)
    finally:
        rep.stop()
    if not t_end:
        raise SystemExit("sampling bench did not finish within an hour")
    return {
        "senders": senders,
        "batch_max_messages": batch,
        "msgs_per_s": (total - base) / (t_end - t_start),
        "copied": int(final["copied"]),
        "received": int(final["received"]),
        "rss_mb": rss.peak / 1e6,
        "rss_mb_at_peak": rss.at_peak,
        # CPU per message over the measured messages, by kind of process: steadier than the rate
        # on a shared machine, and it says where the time goes.
        "cpu_us_per_msg": {k: round(v * 1e6 / (got - base), 1) for k, v in cpu.seconds.items()},
        # The senders' first messages after the first batch (nan when the first batch held them all).
        "new_msgs_per_s": (base - first_got) / (t_start - t_first) if base > first_got else float("nan"),
        "new_cpu_us_per_msg": (
            {k: round(v * 1e6 / (base - first_got), 1) for k, v in new_cpu.seconds.items()}
            if base > first_got
            else {}
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--senders", default="10000,1000000", help="comma-separated sender counts")
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=50_000, help="batch_max_messages of the sampled stream")
    ap.add_argument(
        "--measured", type=int, default=MEASURED, help="messages measured after the first per sender"
    )
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    ap.add_argument("--entry", action="append", default=[], metavar="KEY=VALUE",
                    help="a key of the sampled stream entry, its value as YAML (e.g. sampling_buckets=8)")  # fmt: skip
    ap.add_argument("--out", default="reports/sampling_bench.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sr-sampling-bench-"))
    results: dict[str, Any] = {}

    with local_cluster(1, "psrc") as s, local_cluster(1, "pdst") as d:
        asyncio.run(fill(s.url, "BENCH", MEASURED, args.size))
        asyncio.run(fill(d.url, "TARGET", 0, args.size, subjects="copy.reg.>"))
        script = work / "plain_copier.py"
        script.write_text(PLAIN_COPIER)
        plain = run_copier("plain nats-py copier", [sys.executable, str(script), s.url, d.url, "BENCH", "TARGET"],
                           d.url, "TARGET", MEASURED, lambda: [])  # fmt: skip
    results["plain_msgs_per_s"] = plain["msgs_per_s"]
    print(f"plain nats-py copier: {plain['msgs_per_s']:,.0f} msg/s ({MEASURED:,} messages)")

    rows = []
    for senders in (int(x) for x in args.senders.split(",")):
        with local_cluster(1, "ssrc") as s, local_cluster(1, "sdst") as d:
            t0 = time.monotonic()
            asyncio.run(fill_senders(s.url, senders, args.measured, args.size))
            print(
                f"{senders:,} senders: filled {senders + args.measured:,} messages in {time.monotonic() - t0:.0f}s"
            )
            r = run_sampling(
                s.url,
                d.url,
                work,
                senders + args.measured,
                senders,
                args.batch,
                args.measured,
                dict(c.split("=", 1) for c in args.spark_conf),
                {k: yaml.safe_load(v) for k, v in (e.split("=", 1) for e in args.entry)},
            )
        r["ratio_vs_plain"] = r["msgs_per_s"] / plain["msgs_per_s"]
        rows.append(r)
        print(
            f"sampling, {senders:>9,} senders: {r['msgs_per_s']:8,.0f} msg/s = {r['ratio_vs_plain']:.2f}x plain "
            f"(copied {r['copied']:,} of {r['received']:,}; peak RSS {r['rss_mb']:,.0f} MB)"
        )
        print("  at the peak, MB by process:", ", ".join(f"{k} {v}" for k, v in r["rss_mb_at_peak"].items()))
        cpu = r["cpu_us_per_msg"]
        whole = sum(v for k, v in cpu.items() if not k.startswith("JVM: "))  # those split the JVM's
        print(f"  CPU per message: {whole:.0f} us in all: {cpu}")
        new = r["new_cpu_us_per_msg"]
        new_whole = sum(v for k, v in new.items() if not k.startswith("JVM: "))
        print(f"  senders' first messages after the first batch (copied, advised): {r['new_msgs_per_s']:,.0f} msg/s, "
              f"{new_whole:.0f} us of CPU each: {new}")  # fmt: skip
    results["sampling"] = rows
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
