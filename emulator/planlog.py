"""Publish logs as CSV (t,node,size,force[,seq]): the plan, and what a run published."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from emulator.schedule import Schedule

PLAN_HEADER = "t,node,size,force\n"


def write_plan(sched: Schedule, out: IO[str]) -> int:
    """The expected publish log, deterministic byte for byte for a (scenario, seed, shard)."""
    ident = sched.fleet.identity
    out.write(PLAN_HEADER)
    n = 0
    for _, _, p in sched.ticks():
        if p is None:
            continue
        out.write(
            "".join(
                f"{t:.3f},{ident(node)},{size},{int(force)}\n"
                for t, node, size, force in zip(
                    p.t.tolist(), p.node.tolist(), p.size.tolist(), p.force.tolist(), strict=True
                )
            )
        )
        n += len(p)
    return n


@dataclass(frozen=True)
class LogRow:
    t: float
    node: str
    size: int
    force: bool
    seq: int | None = None


def read_log(path: Path) -> Iterator[LogRow]:
    with path.open() as f:
        for r in csv.DictReader(f):
            seq = r.get("seq")
            yield LogRow(
                float(r["t"]), r["node"], int(r["size"]), r["force"] == "1", int(seq) if seq else None
            )
