"""An `order: subject` lane's rounds and its replay check (replicator.lane_rounds)."""

from __future__ import annotations

import random

from replicator.lane_rounds import held_by_target, rounds


def test_each_round_holds_one_copy_of_a_subject_in_source_order() -> None:
    targets = ["a", "b", "a", "c", "a", "b"]
    assert rounds(targets) == [[0, 1, 3], [2, 5], [4]]
    assert rounds([]) == []


def test_rounds_keep_every_row_once_and_each_subject_in_order() -> None:
    rng = random.Random(7)
    targets = [f"s{rng.randrange(9)}" for _ in range(500)]
    out = rounds(targets)
    assert sorted(i for r in out for i in r) == list(range(500))
    position = {i: k for k, r in enumerate(out) for i in r}
    for subject in set(targets):
        rows = [i for i, t in enumerate(targets) if t == subject]
        assert [position[i] for i in rows] == list(range(len(rows)))  # k-th copy in round k


def test_a_replay_skips_a_subjects_copies_up_to_the_targets_last_one() -> None:
    targets = ["t.a", "t.b", "t.a", "t.a", "t.b"]
    subjects = ["a", "b", "a", "a", "b"]
    seqs = [1, 2, 3, 4, 5]
    for one in (True, False):
        assert held_by_target(targets, subjects, seqs, {"t.a": 3}, one) == [True, False, True, False, False]
        assert held_by_target(targets, subjects, seqs, {}, one) == [False] * 5


def test_a_last_copy_no_longer_in_the_lane_vouches_where_each_target_subject_has_one_source_subject() -> None:
    # The last copy's source message was deleted before this attempt read the range again, or
    # the copy is of a later batch (a checkpoint behind the target).
    targets, subjects, seqs = ["t.a", "t.a", "t.b"], ["a", "a", "b"], [4, 9, 12]
    assert held_by_target(targets, subjects, seqs, {"t.a": 7, "t.b": 40}, True) == [True, False, True]


def test_a_last_copy_from_outside_the_lane_or_of_another_source_subject_skips_nothing() -> None:
    # A subject rewrite that maps two source subjects onto one target subject: they may be in
    # different lanes, so only the source subject of the target's last copy vouches.
    targets = ["t", "t", "t"]
    subjects = ["x.t", "t", "x.t"]
    assert held_by_target(targets, subjects, [4, 9, 12], {"t": 9}, False) == [False, True, False]
    assert held_by_target(targets, subjects, [4, 9, 12], {"t": 7}, False) == [False, False, False]
    assert held_by_target(targets, subjects, [4, 9, 12], {"t": 40}, False) == [False, False, False]
