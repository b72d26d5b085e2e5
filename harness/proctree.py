"""Processes of this machine from /proc (Linux): a process's tree, its CPU ticks and kind, and
the CPU of named groups of process trees over a run (GroupCpu: the scenario runner's report of
who used the cores). bench.proctree adds memory and per-kind CPU for the benchmarks."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(p.name))
    return kids


def _tree(root: int) -> list[tuple[int, int]]:
    """(pid, parent pid) of `root` (parent 0) and its descendants."""
    kids = _children()
    found, todo = [], [(root, 0)]
    while todo:
        pid, parent = todo.pop()
        found.append((pid, parent))
        todo.extend((kid, pid) for kid in kids.get(pid, []))
    return found


def _tree_pids(root: int) -> list[int]:
    """`root` and its descendants."""
    return [pid for pid, _ in _tree(root)]


def _cpu_ticks(pid: int, task: int | None = None) -> int:
    path = f"/proc/{pid}/task/{task}/stat" if task else f"/proc/{pid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _kind(pid: int) -> str:
    cmd = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    if "java" in cmd.split(" ", 1)[0]:
        return "JVM"
    if Path(cmd.split(" ", 1)[0]).name == "stream-replicator":
        return "Go replicator"  # the Choria original's binary (ours starts as a Python script)
    if "pyspark.daemon pyspark.worker" in cmd or "replicator.spark.daemon pyspark.worker" in cmd:
        return "Python task workers"
    if "pyspark" in cmd:
        return "Python planner workers"
    if "nats-server" in cmd:
        return "nats-servers"
    return "driver (Python)"


def _machine_busy_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine since boot (/proc/stat's first line)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


class GroupCpu:
    """CPU seconds of named groups of process trees between `start()` and `stop()`, and the
    whole machine's, so a run on a shared machine shows who used its cores. `groups()` gives
    each group's root pids now (a restarted process has a new pid): it is asked every
    `interval`, and a process is counted up to its last sample, from its ticks when first seen
    (0 for one started after `start()`). A process is known by its pid and its start time (pids
    are reused). A group named in `split` is split further by _kind (JVM, Python task workers,
    driver). CPU of a process that exits within `interval` of its last sample is partly missed
    (under `interval` of it)."""

    def __init__(
        self,
        groups: Callable[[], dict[str, list[int]]],
        split: frozenset[str] = frozenset(),
        interval: float = 1.0,
    ) -> None:
        self.groups, self.split, self.interval = groups, split, interval
        # (pid, start time in ticks since boot) -> ticks when first seen, and (label, last ticks)
        self._first: dict[tuple[int, int], int] = {}
        self._last: dict[tuple[int, int], tuple[str, int]] = {}
        self._lock = threading.Lock()  # the sampling thread adds while lap() reads
        self._since = 0  # start() in ticks since boot
        self._machine: tuple[int, int] = (0, 0)
        self._t0 = 0.0
        self.seconds: dict[str, float] = {}
        self.wall = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            groups = self.groups()
        except Exception:  # a process being replaced just now: the next sample has it
            return
        for name, roots in groups.items():
            for root in roots:
                for pid in _tree_pids(root):
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                        key, ticks = (pid, int(stat[19])), int(stat[11]) + int(stat[12])
                        label = f"{name}: {_kind(pid)}" if name in self.split else name
                        with self._lock:
                            # Started since start(): all its CPU is in the run.
                            self._first.setdefault(key, 0 if key[1] >= self._since else ticks)
                            self._last[key] = (label, ticks)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        hz = os.sysconf("SC_CLK_TCK")
        self._since = int(float(Path("/proc/uptime").read_text().split()[0]) * hz)
        self._t0, self._machine = time.monotonic(), _machine_busy_ticks()
        self._sample()
        self._t.start()

    def lap(self) -> tuple[dict[str, float], float]:
        """Each group's CPU seconds so far, with "rest of the machine" (what no group used), and
        the seconds since `start()`; the sampling goes on."""
        self._sample()
        wall = time.monotonic() - self._t0
        hz = os.sysconf("SC_CLK_TCK")
        used: dict[str, float] = {}
        with self._lock:
            for key, (label, ticks) in self._last.items():
                used[label] = used.get(label, 0.0) + (ticks - self._first[key]) / hz
        busy = (_machine_busy_ticks()[0] - self._machine[0]) / hz
        used["rest of the machine"] = max(0.0, busy - sum(used.values()))
        return {k: round(v, 1) for k, v in sorted(used.items(), key=lambda kv: -kv[1])}, wall

    def stop(self) -> dict[str, float]:
        """The last lap, kept in `seconds` and `wall`; the sampling ends."""
        self._stop.set()
        self._t.join()
        self.seconds, self.wall = self.lap()
        return self.seconds

    @staticmethod
    def percent(seconds: dict[str, float], wall: float) -> dict[str, float]:
        """CPU seconds as percentages of the machine's (all its cores) over `wall` seconds."""
        capacity = wall * (os.cpu_count() or 1)
        return {k: round(100 * v / capacity, 1) for k, v in seconds.items()} if capacity else {}

    def shares(self) -> dict[str, float]:
        """`seconds` as percentages of the machine over `wall` (after `stop()`)."""
        return self.percent(self.seconds, self.wall)
