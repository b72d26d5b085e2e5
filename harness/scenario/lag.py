"""How far a replicator trails its source, in seconds, from once-a-second samples.

The lag in messages says little on its own (10,000 messages is 1.5 s of a 6,667 msg/s fleet and
half an hour of a quiet one). In seconds it is what a user of the copy waits: how long ago the
oldest source message the replicator had not yet processed was stored. Each sample gives the
source stream's last sequence and the sequence the replicator reached, both at the sample's
time; when the source reached a sequence is interpolated between its two samples.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

Timeline = Sequence[tuple[float, float]]
"""(seconds, sequence) samples in time order."""


def reached_at(source: Timeline, seq: float) -> float | None:
    """When the source's last sequence first reached `seq` (None: not within the samples)."""
    seqs = [s for _, s in source]
    i = bisect.bisect_left(seqs, seq)  # sequences only grow
    if i == len(source):
        return None
    t1, s1 = source[i]
    if i == 0:
        return t1
    t0, s0 = source[i - 1]
    return t0 + (t1 - t0) * (seq - s0) / (s1 - s0)


def trailing_seconds(source: Timeline, processed: Timeline) -> list[tuple[float, float]]:
    """(seconds, how long ago the oldest unprocessed source message was stored) at each sample of
    the sequence reached (`processed`); 0 while nothing stored is left unprocessed."""
    out = []
    for t, seq in processed:
        stored = reached_at(source, seq + 1)
        out.append((t, 0.0 if stored is None or stored > t else t - stored))
    return out


def worst_by_minute(points: Timeline, start: float, end: float) -> list[float]:
    """The largest value in each minute from `start` to `end` (the last minute may be shorter;
    a minute without samples is left out)."""
    worst: dict[int, float] = {}
    for t, v in points:
        if start <= t <= end:
            m = int((t - start) // 60)
            worst[m] = max(worst.get(m, 0.0), v)
    return [round(worst[m], 2) for m in sorted(worst)]
