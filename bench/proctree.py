"""Peak memory of a process tree, sampled from /proc (Linux): the sum of RSS, and the sum of PSS.

Summed RSS counts every shared page once per process that maps it: the shared libraries
(pyarrow, libjvm) of Spark's ~12 Python workers, the CDS archive, and a JVM's copy-on-write
pages in the instant a child it forks has not yet exec'd (seen as a second 500 MB `java`).
PSS divides each shared page among the processes that map it, so its sum is the memory the
tree really takes; both are reported.
"""

from __future__ import annotations

import contextlib
import os
import threading
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


def tree_memory(root: int) -> tuple[int, int]:
    """(sum of RSS, sum of PSS) in bytes over `root` and its descendants."""
    kids = _children()
    rss = pss = 0
    todo = [root]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError, ValueError):
            rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
            pss += _pss_bytes(pid)
        todo.extend(kids.get(pid, []))
    return rss, pss


def tree_rss_bytes(root: int) -> int:
    return tree_memory(root)[0]


class PeakRSS:
    """Peak summed RSS (`peak`) and peak summed PSS (`peak_pss`) while in the block."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        self.root, self.interval, self.peak, self.peak_pss = root, interval, 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        rss, pss = tree_memory(self.root)
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
