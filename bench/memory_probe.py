"""Where a one-stream copy's memory goes: RSS by process kind at the tree's peak.

`python -m bench.memory_probe [--conf KEY=VALUE ...] [--nmt]` copies 100,000 x ~1 KB between
two fresh local servers with the real CLI (embedded Spark) and prints, at the moment the summed
RSS of the replicator's process tree peaked, each process's RSS by kind (driver, JVM, Python
task workers, the data source's planner worker), and how long the copy took from start. With
`--nmt` it also prints the JVM's own account (Native Memory Tracking) at the end of the copy;
with `--processes`, every process the tree had while sampled: when it was seen (seconds after
the start), its largest RSS and its command's last words (what a short-lived planner step was).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench import proctree
from bench.copy_bench import fill, stream_count
from harness.localnats import local_cluster
from harness.proctree import _kind, _tree


class Seen:
    """Each process of the tree as sampled: first and last seen (s), largest RSS (MB), command."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.processes: dict[int, tuple[float, float, int, str]] = {}

    def note(self, pid: int, rss_mb: int) -> None:
        now = time.monotonic() - self.started
        first, _, top, command = self.processes.get(pid, (now, now, 0, ""))
        if not command:
            with contextlib.suppress(OSError):
                words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                command = b" ".join(w for w in words if w)[-70:].decode(errors="replace")
        self.processes[pid] = (first, now, max(top, rss_mb), command)

    def report(self) -> str:
        rows = sorted(self.processes.items(), key=lambda kv: kv[1][0])
        return "\n".join(f"  {pid:>7} {a:6.1f}-{b:6.1f} s {mb:5d} MB  {cmd}" for pid, (a, b, mb, cmd) in rows)


def rss_by_kind(root: int, seen: Seen | None = None) -> tuple[int, dict[str, list[int]]]:
    """(summed RSS bytes, MB of each process by kind) over `root`'s tree."""
    return proctree.rss_by_kind(root, seen.note if seen is not None else None)


def jvm_account(root: int) -> str:
    for pid, _ in _tree(root):
        try:
            if _kind(pid) == "JVM":
                out = subprocess.run(["jcmd", str(pid), "VM.native_memory", "summary"],
                                     capture_output=True, text=True, timeout=30).stdout  # fmt: skip
                return "\n".join(
                    ln for ln in out.splitlines() if "committed=" in ln and ln.startswith(("-", "Total"))
                )
        except (OSError, subprocess.SubprocessError):
            continue
    return "(no JVM found)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    ap.add_argument("--nmt", action="store_true", help="the JVM's Native Memory Tracking summary too")
    ap.add_argument(
        "--processes", action="store_true", help="every process seen, its lifetime and largest RSS"
    )
    args = ap.parse_args()
    conf = dict(c.split("=", 1) for c in args.conf)
    if args.nmt:
        opts = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = f"{opts} -XX:NativeMemoryTracking=summary".strip()
    work = Path(tempfile.mkdtemp(prefix="sr-memory-"))
    with local_cluster(1, "memsrc") as s, local_cluster(1, "memdst") as d:
        asyncio.run(fill(s.url, "BENCH", args.messages, args.size))
        cfg = work / "sr.yaml"
        stream = {
            "stream": "BENCH",
            "source_url": s.url,
            "target_url": d.url,
            "target_subject_prefix": "copy",
        }
        cfg.write_text(yaml.safe_dump({"name": "bench", "state_store": str(work / "state"), "spark_conf": conf,
                                       "streams": [stream]}))  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-m", "replicator.cli", "run", "--config", str(cfg)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        started, peak, at_peak = time.monotonic(), 0, {}
        seen = Seen() if args.processes else None
        try:
            while asyncio.run(stream_count(d.url, "BENCH")) < args.messages:
                if time.monotonic() - started > 300 or proc.poll() is not None:
                    sys.exit(
                        "memory probe: the copy did not finish (see the replicator with the same config)"
                    )
                total, kinds = rss_by_kind(proc.pid, seen)
                if total > peak:
                    peak, at_peak = total, kinds
                time.sleep(0.2)
            took = time.monotonic() - started
            account = jvm_account(proc.pid) if args.nmt else ""
        finally:
            proc.terminate()
            proc.wait(40)
    print(f"peak summed RSS {peak / 1e6:,.0f} MB; copy done {took:.1f} s after start")
    for kind, mbs in sorted(at_peak.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {kind:<26}{sum(mbs):>6} MB  {mbs}")
    if account:
        print(account)
    if seen is not None:
        print("every process seen (s after the start, largest RSS, command's end):")
        print(seen.report())


if __name__ == "__main__":
    main()
