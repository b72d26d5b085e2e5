"""The progress line each stream logs on a steady interval: what it read and copied since the
last line, how fast, and how far behind the source it is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Seconds between two progress lines of a stream.
PROGRESS_INTERVAL_S = 30.0


@dataclass
class Progress:
    _last: tuple[float, int, int] | None = field(default=None, init=False)

    def line(self, now: float, received: int, copied: int, lag: int | None) -> str:
        """The line for totals `received`/`copied` at monotonic time `now`."""
        if self._last is None:
            rate = ""
        else:
            t0, r0, c0 = self._last
            dt = max(now - t0, 1e-9)
            rate = f" in the last {dt:.0f}s ({(received - r0) / dt:,.0f} msg/s read, {(copied - c0) / dt:,.0f} copied)"
        self._last = (now, received, copied)
        behind = "unknown" if lag is None else f"{lag:,}"
        return f"{received:,} read, {copied:,} copied{rate}; lag {behind} messages"


def source_lag(first_seq: int, last_seq: int, floor: int) -> int:
    """Messages an entry has still to handle: those above its floor (the last source sequence
    it handled) up to `last_seq`, not counting those below the stream's `first_seq` (expired,
    purged or removed: nothing is left to copy of them)."""
    return max(0, last_seq - max(floor, first_seq - 1))


# A batch slower than this gets a line with where its time went (Spark's own breakdown).
SLOW_BATCH_S = 5.0


def slow_batch_line(
    progress: Mapping[str, Any], threshold_s: float = SLOW_BATCH_S, rows: int | None = None
) -> str | None:
    """The line for a finished batch (a StreamingQueryProgress as a dict) that took longer than
    `threshold_s`, naming its slowest steps; None for a batch that did not. `rows`: the batch's
    rows when Spark did not read them (replicator.spark.small_batches)."""
    durations = progress.get("durationMs") or {}
    total_s = float(durations.get("triggerExecution", 0)) / 1000
    if total_s < threshold_s:
        return None
    steps = sorted(
        ((k, float(v) / 1000) for k, v in durations.items() if k != "triggerExecution" and v >= 100),
        key=lambda kv: -kv[1],
    )
    where = ", ".join(f"{k} {s:.1f} s" for k, s in steps) or "no step over 0.1 s"
    if rows is None:
        rows = int(progress.get("numInputRows", 0))
    return f"batch {progress.get('batchId')} took {total_s:.1f} s ({where}); {rows:,} rows"
