"""What the driver copies ahead of a query while Spark starts (replicator.head_start)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from replicator.head_start import ahead_range


def test_it_starts_where_the_query_would_and_never_at_or_below_the_targets_copies() -> None:
    assert ahead_range(query_start=1, floor=0, source_last=500) == (1, 501)
    assert ahead_range(query_start=1, floor=120, source_last=500) == (121, 501)  # the target holds 1-120
    assert ahead_range(query_start=300, floor=120, source_last=500) == (300, 501)  # the checkpoint is ahead


def test_nothing_when_the_source_holds_nothing_new_or_cannot_be_asked() -> None:
    assert ahead_range(query_start=501, floor=500, source_last=500) is None
    assert ahead_range(query_start=1, floor=0, source_last=0) is None  # an empty stream
    assert ahead_range(query_start=1, floor=0, source_last=None) is None
    # A source recreated since (its end below the target's copies): the query's start decides.
    assert ahead_range(query_start=1, floor=900, source_last=500) is None


class _Entry:
    """An entry as HeadStart sees it: what it copies ahead, recorded."""

    def __init__(
        self, name: str, rng: tuple[int, int] | None, eligible: bool = True, fail_at: int = 0
    ) -> None:
        import logging

        self.name, self.rng, self.eligible, self.fail_at = name, rng, eligible, fail_at
        self.log = logging.getLogger(name)
        self.copied: list[int] = []
        self.settled = 0
        self.sink = self  # its floor: the last copy, acknowledged as it is made
        self.marks: list[int] = []

    @property
    def floor(self) -> int:
        return self.copied[-1] if self.copied else 0

    def note_live_progress(self) -> int:
        self.marks.append(self.floor)
        return self.floor

    def can_copy_ahead(self) -> bool:
        return self.eligible

    def ahead_of_query(self) -> tuple[int, int] | None:
        return self.rng

    def copy_ahead(self, chunk: list[int]) -> None:
        if self.fail_at and chunk[0] >= self.fail_at:
            raise RuntimeError("refused")
        self.copied += chunk

    def settle_ahead(self) -> None:
        self.settled += 1


def _chunks(r: Any, first: int, end: int) -> Iterator[list[int]]:
    for start in range(first, end, 10):
        yield list(range(start, min(start + 10, end)))


def test_each_entry_copies_its_range_in_order_and_settles_once() -> None:
    from replicator.head_start import HeadStart

    a, b = _Entry("a", (1, 36)), _Entry("b", (5, 25))
    skipped, empty = _Entry("sampled", (1, 9), eligible=False), _Entry("caught-up", None)
    head = HeadStart([a, skipped, b, empty], lambda: False, _chunks)  # type: ignore[list-item]
    head.start()
    assert head.wait(10)
    assert a.copied == list(range(1, 36)) and b.copied == list(range(5, 25))
    assert skipped.copied == empty.copied == []
    assert (a.settled, b.settled, skipped.settled, empty.settled) == (1, 1, 0, 0)
    # How far the target acknowledged them is marked as they go, and once more when settled.
    assert a.marks[-1] == 35 and b.marks[-1] == 24, (a.marks, b.marks)
    assert a.marks == sorted(set(a.marks)) and skipped.marks == empty.marks == []


def test_a_failed_chunk_ends_that_entry_only_and_a_stop_ends_all_after_the_chunk_in_hand() -> None:
    from replicator.head_start import HeadStart

    a, b = _Entry("a", (1, 50), fail_at=21), _Entry("b", (1, 50))
    head = HeadStart([a, b], lambda: False, _chunks)  # type: ignore[list-item]
    head.start()
    assert head.wait(10)
    assert a.copied == list(range(1, 21)) and b.copied == list(range(1, 50))
    assert a.settled == b.settled == 1

    stopping = [False]
    c = _Entry("c", (1, 10_000))
    original = c.copy_ahead

    def copy_then_stop(chunk: list[int]) -> None:
        original(chunk)
        stopping[0] = chunk[0] >= 31  # asked to stop after the fourth chunk

    c.copy_ahead = copy_then_stop  # type: ignore[method-assign]
    head = HeadStart([c], lambda: stopping[0], _chunks)  # type: ignore[list-item]
    head.start()
    assert head.wait(10)
    assert c.copied == list(range(1, 41)) and c.settled == 1
