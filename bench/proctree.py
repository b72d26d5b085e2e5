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

from harness.proctree import _cpu_ticks, _kind, _tree, _tree_pids


def _pss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


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


def rss_by_kind(
    root: int, note: Callable[[int, int], None] | None = None
) -> tuple[int, dict[str, list[int]]]:
    """(summed RSS bytes, MB of each process by kind) over `root`'s tree, `root` being the
    driver; `note(pid, mb)` is told each process's RSS."""
    page = os.sysconf("SC_PAGE_SIZE")
    total, kinds = 0, dict[str, list[int]]()
    for pid, parent in _tree(root):
        if _shares_parent_memory(pid, parent):
            continue
        try:
            rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
            kind = "driver (Python)" if pid == root else _kind(pid)
        except (OSError, ValueError):
            continue
        kinds.setdefault(kind, []).append(rss // 1_000_000)
        total += rss
        if note is not None:
            note(pid, rss // 1_000_000)
    return total, kinds


class PeakRSS:
    """Peak summed RSS (`peak`, sampled every `interval`) and peak summed PSS (`peak_pss`,
    every `pss_interval`) while in the block. PSS is sampled less often because reading it
    costs CPU: at 4 Hz over Spark's tree it took ~13 % of a core from the measured run
    (the plain copier's one-process tree costs far less), which biased the comparison."""

    def __init__(self, root: int, interval: float = 0.25, pss_interval: float = 1.0) -> None:
        self.root, self.interval, self.peak, self.peak_pss = root, interval, 0, 0
        self.at_peak: dict[str, list[int]] = {}  # MB of each process by kind, near the RSS peak
        self.pss_interval, self._last_pss = pss_interval, -1e9
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        now = time.monotonic()
        with_pss = now - self._last_pss >= self.pss_interval
        if with_pss:
            self._last_pss = now
        rss, pss = tree_memory(self.root, with_pss)
        if rss > self.peak:  # each process's share of a new peak (read again: only then)
            self.at_peak = rss_by_kind(self.root)[1]
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
