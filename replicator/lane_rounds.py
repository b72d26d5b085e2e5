"""How one `order: subject` lane publishes its part of a batch, as pure decisions.

A lane publishes in rounds: round k holds the k-th copy of each target subject, and a round is
sent only once every copy of the one before it is acknowledged. So a target never stores a
subject's copy after an earlier copy of that subject that it refused or never received: within
one target subject, what the target holds from a lane is a prefix of the lane's copies. That is
what makes a replay safe to shorten: the target's last copy on a subject tells which of the
lane's copies on it are already stored.
"""

from __future__ import annotations

from collections.abc import Sequence


def rounds(targets: Sequence[str]) -> list[list[int]]:
    """Row indices per round, each in row order: round k has the k-th row of each target subject.

    >>> rounds(["a", "b", "a", "c", "a"])
    [[0, 1, 3], [2], [4]]
    """
    out: list[list[int]] = []
    seen: dict[str, int] = {}
    for i, target in enumerate(targets):
        k = seen.get(target, 0)
        seen[target] = k + 1
        if k == len(out):
            out.append([])
        out[k].append(i)
    return out


def held_by_target(
    targets: Sequence[str],
    subjects: Sequence[str],
    seqs: Sequence[int],
    last_copied: dict[str, int],
    one_source_subject_per_target: bool,
) -> list[bool]:
    """Which rows of a lane (in source order) the target already holds, given the source
    sequence of this entry's last copy on each target subject (`last_copied`, absent: none).

    A row is held when the last copy on its target subject is of the row's own source subject,
    at or after it: every earlier attempt hashed that source subject into one lane, whose rounds
    stored its earlier rows first, and batches are published one after another. The source
    subject of the last copy is known when it is a row of this lane, or, when the subject
    rewrite maps one source subject to each target subject (no `target_subject_remove`), from
    the target subject itself (a copy read before a source delete, or from a later batch). A
    rewrite that maps several source subjects to one target subject, hashed into different
    lanes, leaves the rest to the duplicate window.

    >>> held_by_target(["t.a", "t.a", "t.a"], ["a", "a", "a"], [4, 9, 12], {"t.a": 9}, True)
    [True, True, False]
    >>> held_by_target(["t", "t"], ["x.t", "t"], [4, 9], {"t": 9}, False)  # 9 is another subject's
    [False, True]
    """
    subject_of = dict(zip(seqs, subjects, strict=True))
    held = []
    for target, subject, seq in zip(targets, subjects, seqs, strict=True):
        last = last_copied.get(target, 0)
        same = subject_of[last] == subject if last in subject_of else one_source_subject_per_target
        held.append(seq <= last and same)
    return held
