"""The rows about to be published on one target subject, as the pushed-out check counts them
(replicator.nats.jetstream.pushed_out): only those after a row count against it."""

from __future__ import annotations

from replicator.nats.jetstream import RowsOnSubject


def rows(*seqs: int) -> RowsOnSubject:
    return RowsOnSubject(seqs)


def test_a_row_counts_only_the_later_rows_on_its_subject() -> None:
    on_x = rows(1_700, 1_500, 1_501)  # in any order
    assert [on_x.later_than(s) for s in (1_500, 1_501, 1_700)] == [2, 1, 0]
    assert on_x.later_than(1) == 3


def test_a_copy_the_target_holds_of_a_later_row_is_known_as_counted_already() -> None:
    on_x = rows(1_500, 1_501)
    assert on_x.is_later(1_501, 1_500)
    assert not on_x.is_later(1_500, 1_500)  # itself
    assert not on_x.is_later(1_500, 1_501)  # an earlier row
    assert not on_x.is_later(1_502, 1_500)  # not a row: the target's own later message
