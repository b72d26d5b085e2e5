"""How a sampled batch's copies are read back: ranges where dense, one by one where sparse."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replicator.copy_reads import MESSAGE_OVERHEAD, RUN_GAP, OneByOne, Span, chunked, plan_reads


def test_dense_runs_are_ranges_and_sparse_copies_are_read_one_by_one_together() -> None:
    seqs = [1, 2, 3, 4, 1000, 1012, 1024, 2000, 2001, 2002, 5000, 9000, 9100]
    assert plan_reads(seqs, [7] * len(seqs), one_by_one=True) == [
        Span(1, 4),
        OneByOne([1000, 1012, 1024], [7, 7, 7]),
        Span(2000, 2002),
        OneByOne([5000, 9000, 9100], [7, 7, 7]),  # runs far apart, read together
    ]


def test_a_stream_without_direct_gets_is_read_in_ranges_split_where_copies_lie_far_apart() -> None:
    seqs = [1, 13, 25, 25 + RUN_GAP + 1, 25 + RUN_GAP + 2]
    assert plan_reads(seqs, [7] * len(seqs), one_by_one=False) == [
        Span(1, 25),
        Span(26 + RUN_GAP, 27 + RUN_GAP),
    ]


def test_a_lone_copy_and_one_in_two_are_read_one_by_one_and_three_in_four_as_a_range() -> None:
    assert plan_reads([50], [1], one_by_one=True) == [OneByOne([50], [1])]
    assert plan_reads([2, 4, 6, 8], [1] * 4, one_by_one=True) == [OneByOne([2, 4, 6, 8], [1] * 4)]
    assert plan_reads([2, 3, 4, 6], [1] * 4, one_by_one=True) == [Span(2, 6)]


@given(st.lists(st.integers(1, 5000), unique=True, max_size=200), st.booleans())
def test_every_copy_is_read_once_in_order_and_nothing_else_is_kept(raw: list[int], one_by_one: bool) -> None:
    """The sink keeps, of each read, the sequences it asked for: the reads together must find
    each copy exactly once, in ascending order, whatever the pattern."""
    seqs = sorted(raw)
    wanted = set(seqs)
    found: list[int] = []
    for read in plan_reads(seqs, [len(str(s)) for s in seqs], one_by_one):
        if isinstance(read, Span):
            assert read.first in wanted and read.last in wanted  # a range never reaches past its copies
            found.extend(s for s in range(read.first, read.last + 1) if s in wanted)
        else:
            assert one_by_one and read.sizes == [len(str(s)) for s in read.seqs]
            found.extend(read.seqs)
    assert found == seqs


def test_chunks_of_single_reads_are_bounded_by_messages_and_by_bytes() -> None:
    assert list(chunked([1, 2, 3, 4, 5], [10] * 5, max_messages=2, max_bytes=1 << 20)) == [
        [1, 2],
        [3, 4],
        [5],
    ]
    per = 1000 + MESSAGE_OVERHEAD
    assert list(chunked([1, 2, 3, 4], [1000] * 4, max_messages=100, max_bytes=2 * per)) == [[1, 2], [3, 4]]
    # A message larger than the bound is read on its own, never skipped.
    assert list(chunked([1, 2, 3], [10, 5000, 10], max_messages=100, max_bytes=1000)) == [[1], [2], [3]]


@given(
    st.lists(st.integers(0, 5000), max_size=100),
    st.integers(1, 10),
    st.integers(1, 20_000),
)
def test_chunks_hold_every_sequence_once_in_order_none_empty_and_none_past_a_bound(
    sizes: list[int], max_messages: int, max_bytes: int
) -> None:
    seqs = list(range(1, len(sizes) + 1))
    size_of = dict(zip(seqs, sizes, strict=True))
    chunks = list(chunked(seqs, sizes, max_messages, max_bytes))
    assert [s for c in chunks for s in c] == seqs
    for c in chunks:
        assert 0 < len(c) <= max_messages
        assert len(c) == 1 or sum(size_of[s] + MESSAGE_OVERHEAD for s in c) <= max_bytes
