"""Ours against itself: one backlog copied by variants of the replicator, in alternated rounds.

Each variant is the real CLI (`run`) started with a line of Python run first (a setting, a
patch to try before it is written into the code), or with Spark's JVM suspended (SIGSTOP) from
the first copy to the last, to bound what the JVM's start costs a backlog copied ahead of the
query, or with `make bench`'s memory sampler reading its processes throughout (what sampling
costs the copy it measures). Reports msg/s and CPU µs per copy by kind of process, each round
and the medians:

    python -m bench.copy_variants --messages 300000 --rounds 4 --variant base= --variant stopped=@suspend-jvm
    python -m bench.copy_variants --messages 300000 --rounds 4 --variant base= --variant sampled=@sample-memory
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench.copy_bench import fill, wait_count
from bench.proctree import CpuSplit, PeakRSS
from harness.localnats import local_cluster
from harness.proctree import _kind, _tree_pids

SUSPEND_JVM = "@suspend-jvm"
SAMPLE_MEMORY = "@sample-memory"


def one_round(name: str, prelude: str, src: Any, dst: Any, n: int, work: Path, index: int) -> dict[str, Any]:
    target = f"T{index}{name}".upper().replace("-", "_")
    shutil.rmtree(work / "state", ignore_errors=True)
    cfg = work / "sr.yaml"
    stream = {"stream": "BENCH", "source_url": src.url, "target_url": dst.url, "target_stream": target,
              "target_subject_prefix": target.lower()}  # fmt: skip
    cfg.write_text(yaml.safe_dump({"name": "bench", "state_store": str(work / "state"), "streams": [stream]}))
    code = "" if prelude in (SUSPEND_JVM, SAMPLE_MEMORY) else prelude
    code += f"\nimport sys\nfrom replicator.cli import main\nsys.argv = ['stream-replicator', 'run', '-c', {str(cfg)!r}]\nmain()"
    with (work / f"{name}.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=log, start_new_session=True
        )
    # The sampler runs from the start, as `make bench`'s does (bench.copy_bench.run_copier).
    sampler = PeakRSS(proc.pid) if prelude == SAMPLE_MEMORY else contextlib.nullcontext()
    try:
        with sampler:
            first: list[float] = []
            wait_count(dst.url, target, 1, 300, first)
            stopped = (
                [pid for pid in _tree_pids(proc.pid) if _kind(pid) == "JVM"] if prelude == SUSPEND_JVM else []
            )
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            servers = [s.proc.pid for s in (*src.servers, *dst.servers) if s.proc]
            cpu = CpuSplit(proc.pid, servers)
            cpu.start()
            end = wait_count(dst.url, target, n, 600, first)
            seconds = cpu.stop()
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
    finally:
        proc.terminate()
        proc.wait(60)
    return {
        "msgs_per_s": round(n / (end - first[0])),
        "cpu_us": {k: round(v / n * 1e6, 1) for k, v in seconds.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=PYTHON",
                    help=f"a line of Python run before the CLI; {SUSPEND_JVM}: the JVM suspended while copying; {SAMPLE_MEMORY}: make bench's memory sampler running")  # fmt: skip
    args = ap.parse_args()
    variants = dict(v.split("=", 1) for v in args.variant) or {"base": ""}
    work = Path(tempfile.mkdtemp(prefix="sr-variants-"))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    with local_cluster(1, "vsrc") as src, local_cluster(1, "vdst") as dst:
        asyncio.run(fill(src.url, "BENCH", args.messages, args.size))
        for r in range(args.rounds):
            order = list(variants.items())
            for name, prelude in order if r % 2 == 0 else reversed(order):  # alternated
                res = one_round(name, prelude, src, dst, args.messages, work, r)
                runs[name].append(res)
                print(
                    f"round {r + 1} {name}: {res['msgs_per_s']:,} msg/s, µs per copy {res['cpu_us']}",
                    flush=True,
                )
    shutil.rmtree(work, ignore_errors=True)
    for name, rs in runs.items():
        driver = statistics.median(x["cpu_us"].get("driver (Python)", 0.0) for x in rs)
        print(
            f"{name}: median {statistics.median(x['msgs_per_s'] for x in rs):,.0f} msg/s, driver {driver} µs per copy"
        )
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
