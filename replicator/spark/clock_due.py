"""When a caught-up sampled entry's event-time clock next needs to move: written by the sink
after each batch, read by the planner (another process) while nothing new arrives.

A clock batch runs every bucket's stateful function (~0.8 s of work on a 2-core machine), so
running one a second kept an idle sampled entry at ~1.6 cores. Without messages a batch only
matters once a sender's timeout or expiry falls due (SenderTable.next_due_ms): the sink writes
the earliest such clock over every bucket, keyed by the clock of the batch it follows, and the
planner moves the clock then (and at least every `clock_max_idle_ms`). The key makes a file the
planner cannot match (none yet, another checkpoint's, a write lost to a crash of the machine)
harmless: it falls back to a move every `clock_interval_ms`, as before.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClockDue:
    clock_ms: int
    """The clock of the batch it was written after: valid only while the query's offset has it."""
    due_ms: int | None
    """The earliest clock at which some bucket's table changes without messages; None: never."""


def write_clock_due(path: str, due: ClockDue) -> None:
    """Replace the file in one step (a planner reading meanwhile sees the old or the new). One
    that cannot be written is removed, so that no older one stays to be matched: the clock then
    moves every clock_interval_ms. If it cannot be removed either, the OSError is raised (the
    batch fails, and is run again)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(json.dumps({"clock": due.clock_ms, "due": due.due_ms}))
        os.replace(tmp, target)
    except OSError as e:
        target.unlink(missing_ok=True)
        log.warning("could not write %s (%s): the event-time clock moves every second while idle", path, e)


def read_clock_due(path: str, clock_ms: int) -> ClockDue | None:
    """What the file says for a query whose last batch's clock is `clock_ms`; None when there is
    no file, it is unreadable, or it was written after another batch."""
    try:
        doc = json.loads(Path(path).read_text())
        due = ClockDue(int(doc["clock"]), None if doc["due"] is None else int(doc["due"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return due if due.clock_ms == clock_ms else None
