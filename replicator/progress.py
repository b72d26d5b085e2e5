"""The progress line each stream logs on a steady interval: what it read and copied since the
last line, how fast, and how far behind the source it is."""

from __future__ import annotations

from dataclasses import dataclass, field

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
