"""`make bench`: `order: subject` lanes against the strict stream order, in one run.

The same backlog (100,000 x ~1 KB over 10,000 subjects, fresh servers each round) copied four
ways: `order: stream` in embedded Spark (the driver publishes), then `order: subject` with
`--lanes` lanes in embedded Spark and on a local Spark standalone cluster of one and of two
workers (the executors publish). Printed: msg/s over the backlog and the ratios; the figures go
to reports/lanes-bench.json. On one machine the workers share its cores: the 2-worker/1-worker
ratio shows what the lanes cost and whether they spread, not what a second machine adds
(docs/performance.md has the model for N machines).

`--rounds hosts-stream,hosts-subject-2` runs the same two ways with every process on a host of
its own (network namespaces, harness.netns; root): the source and target servers, the Spark
master, two workers and the replicator's driver, which talk over a bridge as machines do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import yaml

from bench.copy_bench import fill, run_copier
from harness.localnats import (
    NatsCluster,
    NatsServer,
    free_port,
    local_cluster,
    wait_jetstream,
    write_server_config,
)
from harness.netns import Lab
from harness.spark_cluster import Place, standalone_cluster

HOSTS = {"src": 10, "dst": 11, "master": 12, "worker-0": 13, "worker-1": 14, "driver": 15, "bench": 2}


@contextlib.contextmanager
def spark_master(workers: int, work: Path, cores: int, lab: Lab | None = None) -> Iterator[str]:
    """local[*] for 0 workers, else a standalone cluster's URL (on `lab`'s hosts if given)."""
    if workers == 0:
        yield "local[*]"
        return
    d = work / f"cluster-{workers}-{'hosts' if lab else 'local'}"
    d.mkdir(parents=True, exist_ok=True)
    places = None
    if lab is not None:
        names = ["master", *(f"worker-{i}" for i in range(workers))]
        places = [Place(lab.hosts[n].address(), tuple(lab.hosts[n].command([]))) for n in names]
    with standalone_cluster(
        Path(pyspark.__file__).parent, d, cores=cores, workers=workers, places=places
    ) as url:
        yield url


@contextlib.contextmanager
def server(name: str, work: Path, lab: Lab | None) -> Iterator[NatsCluster]:
    """One JetStream server: on this host's loopback, or on `lab`'s host `name`."""
    if lab is None:
        with local_cluster(1, name) as c:
            yield c
        return
    host = lab.hosts[name]
    d = work / f"{name}-{free_port()}"
    d.mkdir(parents=True)
    write_server_config(d / "server.conf", name, 4222, d / "store", host=host.address())
    srv = NatsServer(name, 4222, d / "server.conf", log_file=d / "server.log", host=host.address(),
                     prefix=host.command([]))  # fmt: skip
    cluster = NatsCluster([srv])
    srv.start()
    try:
        wait_jetstream(cluster.url)
        yield cluster
    finally:
        cluster.stop()


def make_hosts() -> Lab:
    lab = Lab(f"lanes{os.getpid() % 100000}", {"lan": "10.78.0"})
    try:
        for name, number in HOSTS.items():
            lab.add_host(name, ["lan"], number)
        lab.enter(lab.hosts["bench"])  # the bench fills and counts from a host of its own
    except BaseException:
        lab.close()
        raise
    return lab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--cores", type=int, default=2, help="cores each standalone worker offers")
    ap.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting for every round"
    )
    ap.add_argument("--rounds", default="stream,subject,subject-1,subject-2", help="which rounds, in order")
    ap.add_argument("--out", default="reports/lanes-bench.json")
    args = ap.parse_args()
    n = args.messages
    work = Path(tempfile.mkdtemp(prefix="sr-lanes-bench-"))

    count = [0]

    def round_(label: str, order: str, workers: int, on_hosts: bool = False) -> dict[str, Any]:
        count[0] += 1
        hosts = lab if on_hosts else None
        with (
            server("src" if hosts else f"l{workers}{order[0]}src", work, hosts) as s,
            server("dst" if hosts else f"l{workers}{order[0]}dst", work, hosts) as d,
            spark_master(workers, work, args.cores, hosts) as master,
        ):
            asyncio.run(fill(s.url, "BENCH", n, args.size))
            stream: dict[str, Any] = {"stream": "BENCH", "source_url": s.url, "target_url": d.url,
                                      "target_subject_prefix": "copy"}  # fmt: skip
            if order == "subject":
                stream |= {"order": "subject", "lanes": args.lanes}
            name = f"{count[0]}-{order}-{workers}"  # a checkpoint of its own
            cfg = work / f"{name}.yaml"
            conf = dict(c.split("=", 1) for c in args.conf)
            if hosts:
                conf["spark.driver.host"] = hosts.hosts["driver"].address()
            elif workers:
                conf["spark.driver.host"] = "127.0.0.1"
            cfg.write_text(yaml.safe_dump({"name": "bench", "state_store": str(work / f"state-{name}"),
                                           "spark_master": master, "spark_conf": conf, "streams": [stream]}))  # fmt: skip
            result = run_copier(
                label,
                [
                    *(hosts.hosts["driver"].command([]) if hosts else []),
                    sys.executable,
                    "-m",
                    "replicator.cli",
                    "run",
                    "--config",
                    str(cfg),
                ],
                d.url,
                "BENCH",
                n,
                lambda: [],
                servers=[srv.proc.pid for srv in (*s.servers, *d.servers) if srv.proc],
            )
        result.update(
            order=order, workers=workers, lanes=args.lanes if order == "subject" else 1, hosts=on_hosts
        )
        print(
            f"  {label}: {result['msgs_per_s']:,.0f} msg/s, first copy {result['first_copy_s']:.1f} s",
            flush=True,
        )
        return result

    print(f"lanes bench: {n:,} x {args.size} B over 10,000 subjects, {args.lanes} lanes", flush=True)
    labels: dict[str, tuple[str, str, int, bool]] = {
        "stream": ("order: stream, embedded Spark", "stream", 0, False),
        "subject": (f"order: subject, {args.lanes} lanes, embedded Spark", "subject", 0, False),
        "subject-1": (f"order: subject, {args.lanes} lanes, standalone 1 worker", "subject", 1, False),
        "subject-2": (f"order: subject, {args.lanes} lanes, standalone 2 workers", "subject", 2, False),
        "hosts-stream": ("order: stream, embedded Spark, hosts", "stream", 0, True),
        "hosts-subject-2": (f"order: subject, {args.lanes} lanes, 2 worker hosts", "subject", 2, True),
    }
    chosen = args.rounds.split(",")
    unknown = [r for r in chosen if r not in labels]
    if unknown:
        ap.error(f"--rounds: unknown round {unknown[0]!r}; known: {', '.join(labels)}")
    lab = make_hosts() if any(r.startswith("hosts-") for r in chosen) else None
    try:
        results = [round_(*labels[r]) for r in chosen]
    finally:
        if lab is not None:
            lab.close()
    by_round = dict(zip(chosen, results, strict=True))
    base = results[0]["msgs_per_s"]
    print()
    print(f"{'copier':<52}{'msg/s':>10}{'vs the first':>17}")
    for r in results:
        print(f"{r['copier']:<52}{r['msgs_per_s']:>10,.0f}{r['msgs_per_s'] / base:>16.2f}x")
    ratio = None
    if "subject-1" in by_round and "subject-2" in by_round:
        ratio = by_round["subject-2"]["msgs_per_s"] / by_round["subject-1"]["msgs_per_s"]
        print(f"2 workers / 1 worker: {ratio:.2f}x (one machine: the workers share its cores)")
    if "hosts-stream" in by_round and "hosts-subject-2" in by_round:
        on_hosts = by_round["hosts-subject-2"]["msgs_per_s"] / by_round["hosts-stream"]["msgs_per_s"]
        print(f"on hosts, 2 workers' lanes / stream order: {on_hosts:.2f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"messages": n, "size": args.size, "lanes": args.lanes, "conf": args.conf,
                               "results": results, "two_over_one_worker": ratio}, indent=2, default=str))  # fmt: skip
    print(f"written: {out}")


if __name__ == "__main__":
    main()
