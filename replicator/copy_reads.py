"""How a sampled batch's copies are read back from the source (pure: the sampling sink reads).

Close together, copies are read as one range (a batched direct get returns a chunk of messages
for one request). Far apart, a range would read every message between them: at a fleet's steady
state one message in twelve is a copy. There each copy is read by a direct get of its own, all
of a chunk asked at once. Streams without direct gets are read in ranges only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

# Copies further apart than this many sequences are never read as one range.
RUN_GAP = 256
# A run of copies is read as a range when at least this share of its sequences are copies. In
# bench.sampled_copies_bench (2026-12-07), one by one against ranges: every message a copy 0.9x,
# one in two 1.2x, one in three 1.4x, one in twelve 3.2-4.7x (a fifth of the process's CPU).
DENSE_SHARE = 0.75
# What a message read carries besides its payload (subject, the server's headers), for bounding
# a chunk of single gets by bytes.
MESSAGE_OVERHEAD = 256


@dataclass(frozen=True)
class Span:
    """Read sequences first..last (inclusive) as a range; keep the copies among them."""

    first: int
    last: int


@dataclass(frozen=True)
class OneByOne:
    """Read each of `seqs` (ascending) by a get of its own; `sizes` are their payloads' sizes."""

    seqs: list[int]
    sizes: list[int]


def plan_reads(seqs: Sequence[int], sizes: Sequence[int], one_by_one: bool) -> list[Span | OneByOne]:
    """The reads that find ascending `seqs`, in order. Runs of copies at most RUN_GAP apart are
    ranges when dense (DENSE_SHARE, and two copies or more); the others are read one by one
    (`one_by_one`: the stream takes direct gets), consecutive ones as one read.

    >>> plan_reads([1, 2, 3, 500, 1000, 1012], [10] * 6, one_by_one=True)
    [Span(first=1, last=3), OneByOne(seqs=[500, 1000, 1012], sizes=[10, 10, 10])]
    >>> plan_reads([1, 2, 3, 500], [10] * 4, one_by_one=False)
    [Span(first=1, last=3), Span(first=500, last=500)]
    """
    reads: list[Span | OneByOne] = []
    for i, j in _runs(seqs, RUN_GAP):
        first, last, n = seqs[i], seqs[j], j - i + 1
        if not one_by_one or (n >= 2 and n >= DENSE_SHARE * (last - first + 1)):
            reads.append(Span(first, last))
        elif reads and isinstance(reads[-1], OneByOne):
            reads[-1].seqs.extend(seqs[i : j + 1])
            reads[-1].sizes.extend(sizes[i : j + 1])
        else:
            reads.append(OneByOne(list(seqs[i : j + 1]), list(sizes[i : j + 1])))
    return reads


def _runs(seqs: Sequence[int], gap: int) -> list[tuple[int, int]]:
    """(first index, last index) of each run of ascending `seqs` whose neighbours are at most
    `gap` apart."""
    runs: list[tuple[int, int]] = []
    first = 0
    for k in range(1, len(seqs)):
        if seqs[k] - seqs[k - 1] > gap:
            runs.append((first, k - 1))
            first = k
    if seqs:
        runs.append((first, len(seqs) - 1))
    return runs


def chunked(
    seqs: Sequence[int], sizes: Sequence[int], max_messages: int, max_bytes: int
) -> Iterator[list[int]]:
    """`seqs` cut into chunks of at most `max_messages` and about `max_bytes` (each chunk holds
    one message at least, however large).

    >>> list(chunked([1, 2, 3, 4, 5], [100] * 5, max_messages=2, max_bytes=1 << 20))
    [[1, 2], [3, 4], [5]]
    >>> list(chunked([1, 2, 3], [600, 600, 600], max_messages=10, max_bytes=1000))
    [[1], [2], [3]]
    """
    chunk: list[int] = []
    held = 0
    for seq, size in zip(seqs, sizes, strict=True):
        cost = size + MESSAGE_OVERHEAD
        if chunk and (len(chunk) >= max_messages or held + cost > max_bytes):
            yield chunk
            chunk, held = [], 0
        chunk.append(seq)
        held += cost
    if chunk:
        yield chunk
