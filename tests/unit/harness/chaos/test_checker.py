"""The campaign's checker on digests: what it calls lost, doubled, reordered or overlapping."""

from __future__ import annotations

from harness.chaos.checker import Copy, copy_with_deletes, exact_copy, handovers, overlapping_publishers

S = 1_000_000_000


def _copies(seqs: list[int], who: str = "r0", subject: str = "s", t0: int = 0) -> list[Copy]:
    return [Copy(s, subject, who, t0 + i * S // 100, b"%d" % s) for i, s in enumerate(seqs)]


def _source(n: int) -> dict[int, bytes]:
    return {s: b"%d" % s for s in range(1, n + 1)}


def test_an_exact_copy_passes_and_each_kind_of_damage_is_named() -> None:
    assert exact_copy(_source(5), _copies([1, 2, 3, 4, 5])) == []
    [lost] = exact_copy(_source(5), _copies([1, 2, 4, 5]))
    assert "1 missing (3)" in lost
    [doubled] = exact_copy(_source(5), _copies([1, 2, 3, 3, 4, 5]))
    assert "1 doubled (3)" in doubled and "1 out of order" in doubled
    [swapped] = exact_copy(_source(3), _copies([1, 3, 2]))
    assert "0 missing" in swapped and "1 out of order" in swapped
    changed = _copies([1, 2])
    changed[1] = Copy(2, "s", "r0", 0, b"other")
    assert exact_copy(_source(2), changed) == ["1 copies differ from their source message (2)"]


def test_a_copy_may_miss_only_what_the_source_no_longer_holds() -> None:
    held = {s: b"%d" % s for s in (1, 2, 5, 6)}  # 3 and 4 deleted
    assert copy_with_deletes(held, 6, _copies([1, 2, 3, 5, 6]), per_subject=False) == []
    [lost] = copy_with_deletes(held, 6, _copies([1, 2, 6]), per_subject=False)
    assert "1 messages the source holds were not copied (5)" in lost
    [invented] = copy_with_deletes(held, 6, _copies([1, 2, 5, 6, 7]), per_subject=False)
    assert "never had (7)" in invented


def test_lanes_keep_order_within_each_subject_not_across() -> None:
    held = _source(4)
    lanes = [*_copies([2, 4], subject="a"), *_copies([1, 3], subject="b")]
    assert copy_with_deletes(held, 4, lanes, per_subject=True) == []
    crossed = [*_copies([4, 2], subject="a"), *_copies([1, 3], subject="b")]
    assert copy_with_deletes(held, 4, crossed, per_subject=True) == [
        "1 copies out of order within their subject"
    ]


def test_a_handover_after_the_lease_guard_is_one_leader_after_another() -> None:
    first = _copies([1, 2, 3], "r0")
    later = _copies([4, 5], "r1", t0=first[-1].stored_ns + S)  # a second after
    [move] = handovers(first + later)
    assert (move.before, move.after, move.gap_s) == ("r0", "r1", 1.0)
    assert overlapping_publishers(first + later, 0.2) == []


def test_two_publishers_interleaved_are_an_overlap() -> None:
    both = [Copy(s, "s", "r0" if s % 2 else "r1", s * S // 100, b"") for s in range(1, 9)]
    [overlap] = overlapping_publishers(both, 0.2)
    assert overlap.startswith("7 handovers between publishers closer than 0.2s")
