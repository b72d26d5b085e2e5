"""Peak RSS of a process tree, sampled from /proc (Linux)."""

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


def tree_rss_bytes(root: int) -> int:
    kids = _children()
    total, todo = 0, [root]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        todo.extend(kids.get(pid, []))
    return total


class PeakRSS:
    def __init__(self, root: int, interval: float = 0.25) -> None:
        self.root, self.interval, self.peak = root, interval, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, tree_rss_bytes(self.root))

    def __enter__(self) -> PeakRSS:
        self.peak = tree_rss_bytes(self.root)
        self._t.start()
        return self

    def __exit__(self, *a: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, tree_rss_bytes(self.root))
