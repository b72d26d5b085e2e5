"""How long to wait before restarting a failed stream: doubling from `first` up to `limit`, and
back to `first` once the stream has made progress again (a failure hours after the last one is
retried as soon as the first ever was)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Backoff:
    first: float = 1.0
    limit: float = 30.0
    _next: float = field(init=False)

    def __post_init__(self) -> None:
        self._next = self.first

    def next_wait(self) -> float:
        wait = self._next
        self._next = min(self.limit, self._next * 2)
        return wait

    def reset(self) -> None:
        self._next = self.first
