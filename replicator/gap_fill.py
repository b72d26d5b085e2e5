"""After a batch that could leave gaps failed mid-way: the copies the target lacks below its last
copy of ours, found and published.

A chained batch on a single server never leaves a copy after a gap; an unchained one
(`chain_copies: false`, a target with another writer), or one chained by sequence on a clustered
target, that failed mid-way can: copy k refused or lost, k+1 onwards stored. Resuming after the
target's last copy would skip k for good, so the next start (catch_up) reads the target forward
from when the batch began and publishes what is missing.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Sequence

import pyarrow as pa

from replicator.aio import LoopThread
from replicator.logs import StreamLogger
from replicator.nats.jetstream import RowsOnSubject, copies_in_range, pushed_out, stream_info
from replicator.nats.readers import RawMessage
from replicator.spark.rows import to_record_batch
from replicator.spark.sink import OrderedSink
from replicator.subjects import rewrite_subject

# Reads the source's [first, end) in order, as chunks of messages.
SourceRange = Callable[[int, int], Iterable[Sequence[RawMessage]]]

PUBLISH_CHUNK = 1_000


def next_position(held: dict[int, int]) -> Callable[[int], int | None]:
    """For a source sequence, the lowest target sequence of a copy in `held` (source sequence
    -> target sequence) of a later source sequence: where a copy of it belonged."""
    seqs = sorted(held)
    lowest_from = [0] * len(seqs)  # the lowest target sequence of seqs[i:]
    low = None
    for i in range(len(seqs) - 1, -1, -1):
        low = held[seqs[i]] if low is None else min(low, held[seqs[i]])
        lowest_from[i] = low

    def after(seq: int) -> int | None:
        i = bisect.bisect_right(seqs, seq)
        return lowest_from[i] if i < len(seqs) else None

    return after


class GapFill:
    """One entry's gap fill; it remembers the in-flight range (first, last, since) it last
    checked, so a query restarted in this process does not scan the target again."""

    def __init__(self, loop: LoopThread, log: StreamLogger) -> None:
        self.loop = loop
        self.log = log
        self._checked: tuple[int, int, int] | None = None

    def run(
        self,
        sink: OrderedSink,
        first: int,
        last: int,
        since_ns: int,
        read: SourceRange,
        settle_unknown: bool = True,
    ) -> bool:
        """Publish the copies the target lacks of source sequences `first`-`last` (at or below
        its last copy of ours), of a batch whose publishing began at `since_ns`. False when
        it could not tell which, past the target's duplicate window, and `settle_unknown` is
        not set: then it published nothing and the range is the caller's (set, it is
        settled: nothing published, none known missing)."""
        if first > last or self._checked == (first, last, since_ns):
            return True
        stream = sink.settings.target_stream

        async def present() -> dict[int, int] | None:
            nc = await sink.connection()
            return await copies_in_range(nc, stream, sink.settings.owner, first, last, since_ns)

        async def window_s() -> float:
            info = await stream_info(await sink.connection(), stream)
            if info is None:
                return 0.0  # no stream to ask: taken as past the window (nothing published blind)
            return info.config.duplicate_window or 120.0  # seconds; unset: the server's 2 minutes

        held = self.loop.run(present(), None)  # long, on a busy target; each read has its timeout
        if held is None:
            age_s = (time.time_ns() - since_ns) / 1e9
            if age_s >= self.loop.run(window_s(), 30):
                if not settle_unknown:
                    return False
                self.log.warning(
                    "could not tell which copies of source sequences %d-%d the target lacks (it stored over "
                    "200,000 messages since, or none is found from then): not publishing them again, past its "
                    "duplicate window they would be stored twice",
                    first,
                    last,
                )
                self._checked = (first, last, since_ns)
                return True
            self.log.warning(
                "could not tell which copies of source sequences %d-%d the target lacks: publishing them "
                "again, unchained, within its duplicate window (it drops those it holds)",
                first,
                last,
            )
        elif len(held) == last - first + 1:
            self._checked = (first, last, since_ns)
            return True  # all there: nothing to read again
        missing = [m for chunk in read(first, last + 1) for m in chunk if held is None or m.seq not in held]
        if held is not None and missing:
            # A target that keeps a few messages a subject removed those that later ones pushed
            # out: publishing them again would put old values after new ones. Decided for all
            # before any is published.
            gone = pushed_out_copies(self.loop, sink, [(m.seq, m.subject) for m in missing], held)
            missing = [m for m in missing if m.seq not in gone]
        for i in range(0, len(missing), PUBLISH_CHUNK):
            chunk = missing[i : i + PUBLISH_CHUNK]
            sink.fill_gaps(pa.Table.from_batches([to_record_batch(sink.settings.source_stream, chunk)]))
        self._checked = (first, last, since_ns)
        if missing:
            self.log.warning(
                "the target lacked %d copies of source sequences %d-%d, below copies it held (an unchained "
                "batch failed mid-way when it last stopped): published them now, after those",
                len(missing),
                first,
                last,
            )
        return True


def pushed_out_copies(
    loop: LoopThread,
    sink: OrderedSink,
    rows: Iterable[tuple[int, str]],
    held: dict[int, int],
    counted: Iterable[tuple[int, str]] = (),
) -> set[int]:
    """Of `rows` (source sequence, source subject) that the target lacks and that are about to
    be published, those whose copies a target keeping N messages a subject would have dropped
    anyway, given the copies of ours it holds (`held`: source sequence -> target sequence):
    stored where they belonged, before the next copy it holds, they would have been pushed out
    since, by the later messages it holds on their subject and the later rows on it. Published
    again, they would put an old value after a newer one, or push out the newer one. `counted`:
    more rows of the same publishing, counted on their subjects but not decided here (a
    sampled replay's later parts). A check that fails keeps its row (an old value last rather
    than one lost)."""
    after = next_position(held)
    s = sink.settings

    def on_target(pairs: Iterable[tuple[int, str]]) -> set[tuple[int, str]]:
        return {(seq, rewrite_subject(subject, s.subject_prefix, s.subject_remove)) for seq, subject in pairs}

    targeted = sorted(on_target(rows))  # each row once: twice, it would count as its own later copy
    # The rows on each target subject: a row's later ones there are stored after it, where it
    # belonged and now too.
    on_subject: dict[str, list[int]] = {}
    for seq, target_subject in on_target(counted).union(targeted):
        on_subject.setdefault(target_subject, []).append(seq)
    rows_on = {subject: RowsOnSubject(seqs) for subject, seqs in on_subject.items()}
    gone: set[int] = set()
    for seq, target_subject in targeted:
        later = after(seq)
        if later is None:
            continue  # no later copy held: never stored, or stored last

        async def check(
            seq: int = seq,
            subject: str = target_subject,
            later: int = later,
            also: RowsOnSubject = rows_on[target_subject],
        ) -> bool:
            nc = await sink.connection()
            return await pushed_out(nc, s.target_stream, subject, later - 1, s.owner, seq, also)

        try:
            if loop.run(check(), None):
                gone.add(seq)
        except Exception:
            continue
    return gone
