"""Peak memory of a process tree, sampled from /proc (Linux): the sum of RSS, and the sum of PSS.

Summed RSS counts every shared page once per process that maps it: the shared libraries
(pyarrow, libjvm) of Spark's Python workers, the pages a forked worker still shares with its
daemon, the CDS archive. PSS divides each shared page among the processes that map it, so its
sum is the memory the tree really takes; both are reported. One case is not memory at all: a
child the JVM has just started (posix_spawn: vfork, then exec) runs in the JVM's own address
space until its exec, and /proc shows it with the JVM's RSS (a second 500 MB `java` in some
samples). It is counted once, in the JVM.
"""

from __future__ import annotations

import contextlib
import ctypes
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


def _pss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


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


_libc = ctypes.CDLL(None, use_errno=True)
_SYS_KCMP, _KCMP_VM = 312, 1  # x86_64


def _shares_parent_memory(pid: int, parent: int) -> bool:
    """A child between vfork (the JVM starts processes with posix_spawn) and exec runs in its
    parent's address space: /proc shows the parent's RSS again, though no memory was added."""
    return parent > 0 and _libc.syscall(_SYS_KCMP, parent, pid, _KCMP_VM, 0, 0) == 0


def tree_memory(root: int, with_pss: bool = True) -> tuple[int, int]:
    """(sum of RSS, sum of PSS) in bytes over `root` and its descendants (PSS 0 unless
    `with_pss`: reading smaps_rollup costs ~33 ms of CPU for Spark's tree, statm ~1 ms)."""
    rss = pss = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid, parent in _tree(root):
        if _shares_parent_memory(pid, parent):
            continue
        with contextlib.suppress(OSError, ValueError):
            rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
            if with_pss:
                pss += _pss_bytes(pid)
    return rss, pss


class PeakRSS:
    """Peak summed RSS (`peak`, sampled every `interval`) and peak summed PSS (`peak_pss`,
    every `pss_interval`) while in the block. PSS is sampled less often because reading it
    costs CPU: at 4 Hz over Spark's tree it took ~13 % of a core from the measured run
    (the plain copier's one-process tree costs far less), which biased the comparison."""

    def __init__(self, root: int, interval: float = 0.25, pss_interval: float = 1.0) -> None:
        self.root, self.interval, self.peak, self.peak_pss = root, interval, 0, 0
        self.pss_interval, self._last_pss = pss_interval, -1e9
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        now = time.monotonic()
        with_pss = now - self._last_pss >= self.pss_interval
        if with_pss:
            self._last_pss = now
        rss, pss = tree_memory(self.root, with_pss)
        self.peak, self.peak_pss = max(self.peak, rss), max(self.peak_pss, pss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> PeakRSS:
        self._sample()
        self._t.start()
        return self

    def __exit__(self, *a: object) -> None:
        self._stop.set()
        self._t.join()
        self._sample()


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


def _jvm_threads(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):
            name = (task / "comm").read_text().strip()
            kind = "JIT compiler" if "Compiler" in name else "GC" if "GC" in name else "other"
            out[kind] = out.get(kind, 0) + _cpu_ticks(pid, int(task.name))
    return out


class CpuSplit:
    """CPU seconds spent, between `start()` and `stop()`, by each kind of process in a tree
    (plus any extra pids, e.g. the nats-servers), and by the JVM's JIT compiler threads."""

    def __init__(self, root: int, extra: list[int] | None = None) -> None:
        self.root, self.extra = root, extra or []
        self._a: dict[tuple[str, str], int] = {}
        self.seconds: dict[str, float] = {}

    def _snapshot(self) -> dict[tuple[str, str], int]:
        pids = [*self.extra, *_tree_pids(self.root)]
        snap: dict[tuple[str, str], int] = {}
        for pid in pids:
            with contextlib.suppress(OSError, ValueError):
                snap[(str(pid), "")] = _cpu_ticks(pid)
                if _kind(pid) == "JVM":
                    for kind, ticks in _jvm_threads(pid).items():
                        snap[(str(pid), kind)] = ticks
        return snap

    def start(self) -> None:
        self._a = self._snapshot()

    def stop(self) -> dict[str, float]:
        b, hz = self._snapshot(), os.sysconf("SC_CLK_TCK")
        kinds: dict[str, float] = {}
        for (pid, thread), ticks in b.items():
            used = (ticks - self._a.get((pid, thread), 0)) / hz
            with contextlib.suppress(OSError):
                kind = _kind(int(pid)) if not thread else f"JVM: {thread}"
                kinds[kind] = kinds.get(kind, 0.0) + used
        self.seconds = {k: round(v, 2) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}
        return self.seconds


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
