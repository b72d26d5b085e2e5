"""Start and memory of the embedded default (part of `make bench`): how long after launch the
first copy lands, and the peak summed RSS of the replicator's process tree.

    .venv/bin/python -m bench.start_bench [--rounds 3] [--messages 2000] [--root DIR ...]
        [--spark-conf KEY=VALUE ...] [--entry KEY=VALUE ...]

Each run starts `python -m replicator.cli run` on a one-stream config (everything default)
between two fresh local nats-servers, the source holding `--messages` ~1 KB messages, and
measures from the launch: the first copy in the target (a core subscription on the copies'
subjects sees it as the target stores it), every message copied, the query replicating (/readyz),
and the peak summed RSS and PSS until both. It also prints Spark's steps summed over the batches that copied them (from the
replicator's own /metrics), and when the JVM appeared (the first `java` in the tree).

Each `--root` is a checkout whose code is run (the replicator starts with that directory as its
working directory, so its `replicator` package is the one imported): give two, e.g. a
`git worktree` of an older commit and `.`, to compare them side by side. Runs alternate
between the roots in every round, and each round prints every root's figures as a ratio to the
first root's in the same round, which is what a comparison on this shared, noisy machine can
rely on.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import nats
import yaml

from bench.copy_bench import fill, stream_count
from bench.proctree import PeakRSS
from harness.localnats import free_port, local_cluster
from harness.proctree import _kind, _tree
from harness.scrape import batch_steps

FIGURES = ("first_copy_s", "all_copied_s", "ready_s", "jvm_seen_s", "rss_mb", "pss_mb")


class FirstCopy:
    """When the first message lands on `subjects` of the target (a core subscription: the
    target delivers it as it stores it), seen from a thread of its own."""

    def __init__(self, url: str, subjects: str) -> None:
        self.url, self.subjects = url, subjects
        self.at: float | None = None
        self._ready = threading.Event()
        self._done = threading.Event()
        self._t = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        nc = await nats.connect(self.url)

        async def on(_: Any) -> None:
            if self.at is None:
                self.at = time.monotonic()

        await nc.subscribe(self.subjects, cb=on)
        await nc.flush()
        self._ready.set()
        while not self._done.is_set():
            await asyncio.sleep(0.02)
        await nc.close()

    def __enter__(self) -> FirstCopy:
        self._t.start()
        if not self._ready.wait(10):
            sys.exit(f"start bench: could not subscribe to {self.subjects} on {self.url}")
        return self

    def __exit__(self, *a: object) -> None:
        self._done.set()
        self._t.join(10)


def spark_steps(port: int) -> dict[str, float]:
    """Spark's steps (seconds, summed over the batches so far) and the batch count."""
    steps = batch_steps(f"http://127.0.0.1:{port}/metrics", timeout=10)
    out = {step: seconds for step, (seconds, _) in steps.items()}
    out["batches"] = steps.get("triggerExecution", (0.0, 0.0))[1]
    return out


def jvm_in_tree(root: int) -> bool:
    for pid, _ in _tree(root):
        try:
            if _kind(pid) == "JVM":
                return True
        except OSError:
            continue
    return False


def ready(port: int) -> bool:
    """Whether the replicator's /readyz says every stream replicates (its query started)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:  # 503 (HTTPError) while starting, or not answering yet
        return False


def one_run(
    root: Path, messages: int, conf: dict[str, str], work: Path, entry: dict[str, Any]
) -> dict[str, Any]:
    port = free_port()
    with local_cluster(1, "startsrc") as s, local_cluster(1, "startdst") as d:
        asyncio.run(fill(s.url, "BENCH", messages, 1024))
        cfg = work / f"sr-{port}.yaml"
        stream = {
            "stream": "BENCH",
            "source_url": s.url,
            "target_url": d.url,
            "target_subject_prefix": "copy",
            **entry,
        }
        cfg.write_text(yaml.safe_dump({"name": "start", "state_store": str(work / f"state-{port}"),
                                       "monitor_port": port, "spark_conf": conf, "streams": [stream]}))  # fmt: skip
        with FirstCopy(d.url, "copy.>") as first:
            t0 = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "replicator.cli", "run", "--config", str(cfg)],
                                    cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)  # fmt: skip
            jvm_seen = None
            done: float | None = None
            try:
                with PeakRSS(proc.pid) as rss:
                    while True:
                        if time.monotonic() - t0 > 300 or proc.poll() is not None:
                            sys.exit(
                                f"start bench: the copy from {root} did not finish (run its config: {cfg})"
                            )
                        if jvm_seen is None and jvm_in_tree(proc.pid):
                            jvm_seen = time.monotonic() - t0
                        copied = done is None and first.at is not None
                        if copied and asyncio.run(stream_count(d.url, "BENCH")) >= messages:
                            done = time.monotonic() - t0
                        # The peak counts until the query replicates too (/readyz): copies made
                        # ahead of it while Spark starts end before Spark's memory is all there.
                        if done is not None and ready(port):
                            break
                        time.sleep(0.05)
                    ready_s = time.monotonic() - t0
                time.sleep(1)  # the last batch's progress reaches the metrics after its copies
                steps = spark_steps(port)
            finally:
                proc.terminate()
                try:
                    proc.wait(40)
                except subprocess.TimeoutExpired:
                    proc.kill()
    assert first.at is not None
    return {
        "first_copy_s": first.at - t0,
        "all_copied_s": done,
        "ready_s": ready_s,
        "jvm_seen_s": jvm_seen if jvm_seen is not None else float("nan"),
        "rss_mb": rss.peak / 1e6,
        "pss_mb": rss.peak_pss / 1e6,
        "steps": steps,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--root", action="append", default=[], help="a checkout to run (repeat to compare)")
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--entry", action="append", default=[], metavar="KEY=VALUE",
                    help="a key of the stream entry, its value as YAML (e.g. copy_ahead=true)")  # fmt: skip
    args = ap.parse_args()
    roots = [Path(r).resolve() for r in args.root] or [Path.cwd()]
    for r in roots:
        if not (r / "replicator" / "cli.py").is_file():
            sys.exit(
                f"start bench: {r} is not a checkout of stream-replicator (no replicator/cli.py); give --root DIR"
            )
    conf = dict(c.split("=", 1) for c in args.spark_conf)
    entry = {k: yaml.safe_load(v) for k, v in (e.split("=", 1) for e in args.entry)}
    work = Path(tempfile.mkdtemp(prefix="sr-start-"))
    runs: dict[Path, list[dict[str, Any]]] = {r: [] for r in roots}
    for n in range(1, args.rounds + 1):
        for root in roots:
            run = one_run(root, args.messages, conf, work, entry)
            runs[root].append(run)
            base = runs[roots[0]][-1]
            ratios = "  ".join(f"{f} {run[f] / base[f]:.2f}x" for f in ("first_copy_s", "ready_s", "rss_mb"))
            print(f"round {n} {root}: first copy {run['first_copy_s']:.2f} s, all {run['all_copied_s']:.2f} s, "
                  f"replicating {run['ready_s']:.2f} s, "
                  f"JVM at {run['jvm_seen_s']:.2f} s, peak RSS {run['rss_mb']:.0f} MB, PSS {run['pss_mb']:.0f} MB"
                  + (f"  [{ratios} of {roots[0].name}]" if root != roots[0] else ""), flush=True)  # fmt: skip
            steps = {k: round(v, 3) for k, v in sorted(run["steps"].items())}
            print(f"    Spark's steps, summed (s): {steps}", flush=True)
    print(f"\nmedians over {args.rounds} rounds, {args.messages:,} messages:")
    for root in roots:
        med = {f: statistics.median(r[f] for r in runs[root]) for f in FIGURES}
        print(f"  {root}: first copy {med['first_copy_s']:.2f} s, all {med['all_copied_s']:.2f} s, replicating "
              f"{med['ready_s']:.2f} s, JVM at "
              f"{med['jvm_seen_s']:.2f} s, peak RSS {med['rss_mb']:.0f} MB, PSS {med['pss_mb']:.0f} MB")  # fmt: skip
    print("goals (issue 32): first copy <= 3 s after start, peak summed RSS <= 600 MB")


if __name__ == "__main__":
    main()
