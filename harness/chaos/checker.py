"""The campaign's checks of what a schedule left in the target streams, given the sources as
they now are. Pure: each takes the messages' digests and returns what is wrong (empty: all
well), so they are tested without servers."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Copy:
    """One message of a target stream: its source sequence (Choria-SR-Source), subject, the
    replicator named in that header (who published it), its stored time, and its data."""

    source_seq: int
    subject: str
    publisher: str
    stored_ns: int
    data: bytes


def _examples(items: list[int], n: int = 5) -> str:
    return ", ".join(map(str, items[:n])) + (" ..." if len(items) > n else "")


def exact_copy(source: dict[int, bytes], copies: list[Copy]) -> list[str]:
    """A stream order copy of a source nothing was deleted from: every sequence once, in
    order, with its data."""
    got = [c.source_seq for c in copies]
    want = sorted(source)
    problems = []
    if got != want:
        missing = sorted(set(want) - set(got))
        doubled = sorted(s for s, n in Counter(got).items() if n > 1)
        disorder = sum(1 for a, b in itertools.pairwise(got) if b <= a)
        problems.append(
            f"{len(got)} copies of {len(want)} messages: {len(missing)} missing ({_examples(missing)}), "
            f"{len(doubled)} doubled ({_examples(doubled)}), {disorder} out of order"
        )
    changed = [c.source_seq for c in copies if c.source_seq in source and source[c.source_seq] != c.data]
    if changed:
        problems.append(f"{len(changed)} copies differ from their source message ({_examples(changed)})")
    return problems


def copy_with_deletes(
    source: dict[int, bytes], last_seq: int, copies: list[Copy], per_subject: bool
) -> list[str]:
    """A copy of a source whose messages may have been deleted (per-subject limits, max_age, a
    delete) before they could be read: each sequence at most once; in stream order, or with
    `per_subject` in order within each subject; every message the source still holds copied,
    with its data; a sequence may be missing only if the source no longer holds it."""
    problems = []
    got = [c.source_seq for c in copies]
    doubled = sorted(s for s, n in Counter(got).items() if n > 1)
    if doubled:
        problems.append(f"{len(doubled)} sequences copied more than once ({_examples(doubled)})")
    if per_subject:
        lanes: dict[str, list[int]] = defaultdict(list)
        for c in copies:
            lanes[c.subject].append(c.source_seq)
        disorder = sum(1 for seqs in lanes.values() for a, b in itertools.pairwise(seqs) if b <= a)
        what = "within their subject"
    else:
        disorder = sum(1 for a, b in itertools.pairwise(got) if b <= a)
        what = "in stream order"
    if disorder:
        problems.append(f"{disorder} copies out of order {what}")
    missing = sorted(set(source) - set(got))
    if missing:
        problems.append(f"{len(missing)} messages the source holds were not copied ({_examples(missing)})")
    beyond = sorted(s for s in set(got) if s > last_seq or s < 1)
    if beyond:
        problems.append(f"{len(beyond)} copies of sequences the source never had ({_examples(beyond)})")
    changed = [c.source_seq for c in copies if c.source_seq in source and source[c.source_seq] != c.data]
    if changed:
        problems.append(f"{len(changed)} copies differ from their source message ({_examples(changed)})")
    return problems


@dataclass(frozen=True)
class Handover:
    """Where one publisher's copies gave way to another's, in target order."""

    before: str
    after: str
    gap_s: float  # between the last copy of the one and the first of the other


def handovers(copies: list[Copy]) -> list[Handover]:
    out = []
    for a, b in itertools.pairwise(copies):
        if a.publisher != b.publisher:
            out.append(Handover(a.publisher, b.publisher, (b.stored_ns - a.stored_ns) / 1e9))
    return out


def overlapping_publishers(copies: list[Copy], min_gap_s: float) -> list[str]:
    """Two instances publishing for one entry in overlapping lease periods. A lease ends on the
    instance's clock `guard` seconds before the bucket can drop its key, and the next leader
    wins only after that: between the last copy of one leader and the first of the next
    there are at least `guard` seconds, less what was still in the network. A handover
    closer than `min_gap_s` (a fraction of the guard) means both were writing."""
    close = [h for h in handovers(copies) if h.gap_s < min_gap_s]
    return [
        f"{len(close)} handovers between publishers closer than {min_gap_s}s (first: {close[0].before} -> "
        f"{close[0].after} {close[0].gap_s * 1000:.0f} ms apart): two instances published at once"
    ] if close else []  # fmt: skip
