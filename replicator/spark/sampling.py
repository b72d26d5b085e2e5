"""Sampling on Spark: per-bucket state, one Python call per bucket per batch.

    source (sampling rows + clock rows) -> groupBy(bucket).applyInPandasWithState(decide)
      -> foreachBatch(SamplingSink): copies to the target in order, advisories to the source

Senders are hashed into `sampling_buckets` buckets; a bucket's sender table is one value in
Spark's state store (RocksDB, in the checkpoint under state_store), so kill -9 and restart
continue exactly where the last committed batch left off. One group per sender was measured
20x slower before this design: the per-group Python cost dominated.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.aio import LoopThread
from replicator.copy_reads import Span, plan_reads
from replicator.gap_fill import pushed_out_copies
from replicator.metrics import LIMITER, metrics
from replicator.nats.advisories import publish_advisories
from replicator.nats.jetstream import copies_in_range, stream_info
from replicator.sampling import state
from replicator.sampling.rules import Message, SamplingParams
from replicator.source_reader import SourceReader, SourceStreamGone
from replicator.spark.clock_due import ClockDue, write_clock_due
from replicator.spark.rows import copied_subjects, to_record_batch
from replicator.spark.sink import BatchResult, OrderedSink, PublishError
from replicator.spark.unacked import Unacked, UnackedRecord, first_failure

if TYPE_CHECKING:
    import pandas as pd

    from replicator.nats.readers import RawMessage

log = logging.getLogger(__name__)

# One row per copy (kind copy), per advisory (kind adv, with its event, and its event id in
# `event_id`: the payload's and the Nats-Msg-Id it is published with), and per bucket and
# batch (kind stats: how many messages the bucket decided in `received`, their bytes in
# `received_bytes` and the last one's sequence in `seq`; its senders in `size`, those advised
# timed out in `warned`, how many of the messages had no sender or were forced, in `unkeyed`
# and `forced`, the batch's clock in `ts_ms`, and in `due_ms` the clock at which the bucket's
# table next changes without messages, null for never; every bucket runs in every batch).
# Messages not copied have no row: most are not, and each row costs Spark's conversions and the
# driver's collect.
OUTPUT_SCHEMA = (
    "kind STRING, seq BIGINT, subject STRING, ts_ms BIGINT, event_id STRING, data BINARY, size INT, "
    "event STRING, unkeyed INT, forced INT, warned INT, received INT, received_bytes BIGINT, due_ms BIGINT"
)
# A bucket's sender table, encoded by replicator.sampling.state.
STATE_SCHEMA = "table BINARY"
KIND_COPY, KIND_ADVISORY, KIND_STATS = "copy", "adv", "stats"


# A sampled batch's debug line: where its time went (bench/batch_times.py sums them by minute).
BATCH_TIMES_LINE = (
    "batch %d: %d messages, %d copied, %d advisories; "
    "spark %.3f s, copies %.3f s, advisories %.3f s, all %.3f s"
)


def decide_bucket(
    p: SamplingParams,
    seed: dict[int, bytes] | None,
    bucket: int,
    columns: BucketRows,
    group_state: Any,
) -> dict[str, Any]:
    """The rules for one bucket and batch: its sender table from `group_state` (or its seed)
    updated in place there, and the output rows (OUTPUT_SCHEMA) as columns: numpy arrays, or
    lists holding None for a null."""
    import numpy as np  # runs in Spark's workers

    first = (seed or {}).get(bucket)  # this bucket's seed, if any
    seeded = first is not None
    table = state.decode(group_state.get[0] if group_state.exists else first)
    seq_all, ts_all = columns.seq, columns.ts_ms
    is_clock = seq_all < 0  # clock rows carry the batch's clock in ts_ms (rows.clock_batch)
    clock_ms = int(ts_all[is_clock].max()) if is_clock.any() else table.clock_ms
    order = np.flatnonzero(~is_clock)
    order = order[np.argsort(seq_all[order], kind="stable")]
    seqs, ts_ms = seq_all[order], ts_all[order]
    sizes = columns.size[order]
    msgs = [
        Message(seq, sender if isinstance(sender, str) else None, ts, size, bool(force))
        for seq, sender, ts, size, force in zip(
            seqs.tolist(),
            columns.sender[order].tolist(),
            ts_ms.tolist(),
            sizes.tolist(),
            columns.force[order].tolist(),
            strict=True,
        )
    ]
    copies, advs = table.process(msgs, clock_ms, p)
    # A seeded bucket keeps its state even when empty: removed, the seed would apply again.
    # One whose senders all left keeps it for the hour it remembers them (`admin fleet`).
    if len(table) or seeded or table.expired:
        group_state.update((state.encode(table),))
    elif group_state.exists:
        group_state.remove()
    copied = np.flatnonzero(np.array(copies, bool))
    n_copies, n_advs = len(copied), len(advs)
    # Each id once: the payload's event_id is the Nats-Msg-Id the sink publishes it with.
    event_ids = [a.event_id(p.stream) for a in advs]
    no_copy, no_row = [None] * n_copies, [None] * (n_copies + n_advs)
    return {
        "kind": [KIND_COPY] * n_copies + [KIND_ADVISORY] * n_advs + [KIND_STATS],
        "seq": np.concatenate(
            [seqs[copied], np.array([a.seq for a in advs], np.int64), [seqs[-1] if len(seqs) else -1]]
        ),
        # A copy's subject, headers and payload are read back from the source by the sink
        # (rows carry no payloads: rows.py).
        "subject": [*no_copy, *(a.subject(p.advisory_subject) for a in advs), None],
        "ts_ms": np.concatenate([ts_ms[copied], np.array([a.event_ms for a in advs], np.int64), [clock_ms]]),
        "event_id": [*no_copy, *event_ids, None],
        "data": [*no_copy, *(a.payload(p, i) for a, i in zip(advs, event_ids, strict=True)), None],
        "size": np.concatenate([sizes[copied], np.zeros(n_advs, np.int64), [len(table)]]),
        "event": [*no_copy, *(str(a.event) for a in advs), None],
        "unkeyed": [*no_row, sum(m.sender is None for m in msgs)],
        "forced": [*no_row, sum(m.force for m in msgs)],
        "warned": [*no_row, int(table.warned.sum())],
        "received": [*no_row, len(msgs)],
        "received_bytes": [*no_row, int(sizes.sum())],
        "due_ms": [*no_row, table.next_due_ms(p)],
    }


@dataclass(frozen=True)
class BucketRows:
    """One bucket's rows of a batch (DECIDE_COLUMNS but the bucket), as numpy arrays: the
    numbers as int64, sender and force as objects (None for a null)."""

    seq: Any
    ts_ms: Any
    size: Any
    sender: Any
    force: Any


def bucket_function(
    p: SamplingParams, seed: dict[int, bytes] | None = None
) -> Callable[[Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The rules for one bucket and batch, as applyInPandasWithState calls them. `seed`: each
    bucket's first table, for a query with no committed batch yet (senders imported from
    Choria's state: replicator.sampling.choria_state). The function also carries the same
    rules on Arrow (`arrow_decide`), which the replicator's Spark workers call instead
    (replicator.spark.stateful_arrow): pandas on the way in and out cost them more than the
    rules did."""

    def decide(key: Any, frames: Iterator[pd.DataFrame], group_state: Any) -> Iterator[pd.DataFrame]:
        import numpy as np  # runs in Spark's workers; the driver has no use for pandas
        import pandas as pd

        parts = list(frames)  # several when the bucket's rows exceed Spark's batch limits
        df = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        rows = BucketRows(
            seq=df["seq"].to_numpy(np.int64),
            ts_ms=df["ts_ms"].to_numpy(np.int64),
            size=df["size"].to_numpy(np.int64),
            sender=df["sender"].to_numpy(object),
            force=df["force"].to_numpy(object),
        )
        out = decide_bucket(p, seed, int(key[0]), rows, group_state)
        out["due_ms"] = pd.array(out["due_ms"], dtype="Int64")
        # One frame built from whole columns: concatenating frames whose columns hold None made
        # pandas test every value of them (~6 % of the workers' time at 100,000 senders).
        yield pd.DataFrame(out)

    def arrow_decide(
        key: tuple[Any, ...], values: pa.RecordBatch, group_state: Any, out_type: pa.StructType
    ) -> pa.StructArray:
        """The same rules on one bucket's rows as Arrow: a struct array of `out_type` (the
        output schema as Spark's workers type it)."""
        import numpy as np

        def column(name: str, dtype: Any) -> Any:
            return values.column(name).to_numpy(zero_copy_only=False).astype(dtype, copy=False)

        def objects(name: str) -> Any:
            out = np.empty(values.num_rows, object)
            out[:] = values.column(name).to_pylist()
            return out

        rows = BucketRows(
            seq=column("seq", np.int64),
            ts_ms=column("ts_ms", np.int64),
            size=column("size", np.int64),
            sender=objects("sender"),
            force=objects("force"),
        )
        out = decide_bucket(p, seed, int(key[0]), rows, group_state)
        return pa.StructArray.from_arrays(
            [pa.array(out[f.name], f.type) for f in out_type], fields=list(out_type)
        )

    decide.arrow_decide = arrow_decide  # type: ignore[attr-defined]
    return decide


# What the rules read of a sampled row. The rest (stream, subject, headers, data) stays out of
# the shuffle and of the workers' frames: the sink reads the copies back from the source.
DECIDE_COLUMNS = ("bucket", "seq", "ts_ms", "sender", "force", "size")


def decided_per_bucket(rows: Any, p: SamplingParams, seed: dict[int, bytes] | None = None) -> Any:
    """The sampled source's rows (a streaming DataFrame) -> the rules' output rows
    (OUTPUT_SCHEMA), each bucket's senders kept in Spark's state store."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    from replicator.spark.binary_pickler import install_binary_pickler  # the driver's only

    # Every batch sends each bucket's table to the workers: as bytes, not Spark's per-byte string.
    install_binary_pickler(rows.sparkSession)
    return (
        rows.select(*DECIDE_COLUMNS)
        .groupBy("bucket")
        .applyInPandasWithState(
            bucket_function(p, seed), OUTPUT_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout
        )
    )


async def _next_chunk(
    chunks: AsyncGenerator[list[RawMessage], None], ahead: asyncio.Task[list[RawMessage] | None] | None
) -> tuple[list[RawMessage] | None, asyncio.Task[list[RawMessage] | None] | None]:
    """The chunk `ahead` reads (the first of `chunks` when None; None after the last), and the
    task that reads the one after it, started before returning (None once the last was read)."""

    async def read() -> list[RawMessage] | None:
        return await anext(chunks, None)

    chunk = await (ahead if ahead is not None else read())
    return chunk, (asyncio.create_task(read()) if chunk is not None else None)


async def _closed(
    chunks: AsyncGenerator[list[RawMessage], None], ahead: asyncio.Task[list[RawMessage] | None] | None
) -> None:
    """Close `chunks` once its read ahead is over (cancelled if it still runs): a generator
    cannot be closed while a read of it runs."""
    if ahead is not None:
        ahead.cancel()
        await asyncio.wait({ahead})
        if not ahead.cancelled():
            ahead.exception()  # seen: a read that failed behind a publish that failed is not news
    await chunks.aclose()


@dataclass(frozen=True)
class DecidedBatch:
    """What the rules decided in one batch (the rows of OUTPUT_SCHEMA, collected)."""

    copies: list[int]
    """Sequences to copy, ascending."""
    copy_times_ms: list[int]
    """When each of `copies` was stored (ms), as the rules saw it: the read-back must find the same."""
    copy_sizes: list[int]
    """Each of `copies`' payload size (bounds the chunks of copies read one by one)."""
    advisories: pa.Table
    """In event-time order (then by the message that caused each)."""
    stats: pa.Table
    received: int
    """Messages decided, copied or not."""
    received_bytes: int
    last_seq: int
    """The batch's last message (-1 without one): everything up to it is handled once the copies
    are published."""
    clock_ms: int | None = None
    """The batch's event-time clock (None: no bucket ran)."""
    due_ms: int | None = None
    """The earliest clock at which some bucket's table changes without messages (None: never)."""

    @classmethod
    def of(cls, table: pa.Table) -> DecidedBatch:
        kinds = table.column("kind")
        stats = table.filter(pc.equal(kinds, KIND_STATS))
        last = pc.max(stats.column("seq")).as_py() if stats.num_rows else None
        clock = pc.max(stats.column("ts_ms")).as_py() if stats.num_rows else None
        due = pc.min(stats.column("due_ms")).as_py() if stats.num_rows else None
        copies = table.filter(pc.equal(kinds, KIND_COPY)).select(["seq", "ts_ms", "size"]).sort_by("seq")
        return cls(
            copies=copies.column("seq").to_pylist(),
            copy_times_ms=copies.column("ts_ms").to_pylist(),
            copy_sizes=copies.column("size").to_pylist(),
            advisories=table.filter(pc.equal(kinds, KIND_ADVISORY)).sort_by(
                [("ts_ms", "ascending"), ("seq", "ascending")]
            ),
            stats=stats,
            received=int(pc.sum(stats.column("received")).as_py() or 0),
            received_bytes=int(pc.sum(stats.column("received_bytes")).as_py() or 0),
            last_seq=int(last) if last is not None else -1,
            clock_ms=int(clock) if clock is not None else None,
            due_ms=int(due) if due is not None else None,
        )


class SamplingSink:
    """foreachBatch sink of the sampling query: copies in source order, then advisories."""

    def __init__(
        self,
        ordered: OrderedSink,
        loop: LoopThread,
        source: SourceReader,
        p: SamplingParams,
        record: UnackedRecord | None = None,
    ) -> None:
        self.ordered = ordered
        self.loop = loop
        # On a connection of its own to the source: advisories out, copies' payloads in.
        self.source = source
        self.p = p
        # Where the planner reads when the clock next needs to move: the same options as its.
        self.clock_due_file = source.o.sampling.clock_due_file if source.o.sampling else ""
        # What failed publishes sent: some may be in the target with their acks lost. Spark
        # replays the batch, perhaps past the target's duplicate window, where Nats-Msg-Id no
        # longer drops them, so the replay leaves out those the target holds. Kept on disk too
        # (`record`), for a replay after a kill or a takeover (replicator.spark.unacked).
        self._unacked: Unacked | None = None
        self._record = record
        self._written: Unacked | None = None  # what the record on disk names, as this process wrote it

    def resume(self, committed: int = 0, took_over: bool = False) -> None:
        """The entry starts or takes over as leader: what an earlier run (or an instance that
        led before) recorded joins what this process knows, and what failed publishes sent up
        to `committed` (the checkpoint's last committed source sequence) is in the target. A
        takeover has moved the sink's floor to the target's last copy, which does not vouch
        for a copy missing below it."""
        u = self._unacked
        if u is not None and took_over:
            u = replace(u, sink_floor_vouches=False)
        if self._record is not None:
            found = self._record.read()
            if found.dropped:
                self.ordered.log.warning("dropping %s: %s", self._record.path, found.dropped)
                self._record.clear()
            self._written = found.unacked  # what the disk names now
            if found.unacked is not None:
                u = found.unacked if u is None else u.merged(found.unacked)
        if u is not None and committed:
            u = u.settled_up_to(committed)
        if u is not None and (self._unacked is None or not u.names_the_same(self._unacked)):
            self.ordered.log.info(
                "%d copies failed publishes sent (source sequences %d-%d) are checked against the target "
                "when Spark replays their batch",
                len(u.seqs),
                min(u.seqs),
                max(u.seqs),
            )
        self._keep(u)

    def _keep(self, u: Unacked | None) -> None:
        """`u` is what failed publishes sent from now on, on disk too while this instance
        leads: a deposed leader must not remove or replace what its successor read or wrote."""
        self._unacked = u
        if self._record is None or not self.ordered.leading():
            return
        if u is None:
            if self._written is not None:
                self._record.clear()
        elif self._written is None or not u.names_the_same(self._written):
            self._record.write(u)
        self._written = u

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        self.ordered.check_leader()
        table = batch_df.toArrow()  # Spark's part: the read, the rules, the collect
        self.publish_decided(table, batch_id, started, collected=time.monotonic())

    def publish_decided(
        self, table: pa.Table, batch_id: int, started: float, collected: float | None = None
    ) -> None:
        """Publish what the rules decided in one batch (their rows, collected at `collected`,
        monotonic; Spark's part is from `started` to it): the copies in source order, then the
        advisories; then count the batch."""
        collected = started if collected is None else collected
        decided = DecidedBatch.of(table)
        stats, advs = decided.stats, decided.advisories
        result = BatchResult(received=decided.received, received_bytes=decided.received_bytes)
        copies_s = 0.0
        if result.received:
            result.last_seq = decided.last_seq
            on_subjects = self._replayed_subjects(decided)
            copies_began = time.monotonic()
            for part in self._copies(decided):
                r = self._publish_copies(part, on_subjects)
                result.copied += r.copied
                result.copied_bytes += r.copied_bytes
                result.too_old += r.too_old
                result.duplicates += r.duplicates
            copies_s = time.monotonic() - copies_began
            # Every message of the batch is handled: copied, or deliberately skipped.
            self.ordered.handled_up_to(result.last_seq)
            if self._unacked is not None and max(self._unacked.seqs) <= result.last_seq:
                self._keep(None)  # replayed past it: what it did not copy again is not a copy now
        m, lab = metrics(), self.ordered.labels
        advising_began = time.monotonic()
        if advs.num_rows and self.p.advisory_subject:
            self.ordered.check_leader()
            counts = pc.value_counts(advs.column("event")).to_pylist()
            try:
                self.loop.run(self._advise(advs), timeout=None)
            except Exception:
                for c in counts:
                    m.advisory_errors.labels(c["values"], lab.stream, lab.replicator).inc(c["counts"])
                raise
            # Counted once published: a batch that failed before is replayed and counted then.
            for c in counts:
                m.advisories.labels(c["values"], lab.stream, lab.replicator).inc(c["counts"])
        advisories_s = time.monotonic() - advising_began
        # The senders after this batch, and what its messages were (counted once it is handled).
        tracked = int(pc.sum(stats.column("size")).as_py() or 0)
        warned = int(pc.sum(stats.column("warned")).as_py() or 0)
        lab.of(m.tracked).set(tracked)
        m.senders.labels(*lab.values(), "healthy").set(tracked - warned)
        m.senders.labels(*lab.values(), "warning").set(warned)
        expired = pc.sum(pc.equal(advs.column("event"), "expire")).as_py() if advs.num_rows else 0
        lab.of(m.expired).inc(int(expired or 0))
        m.unkeyed.labels(LIMITER, lab.stream, lab.replicator).inc(
            int(pc.sum(stats.column("unkeyed")).as_py() or 0)
        )
        m.forced.labels(LIMITER, lab.stream, lab.replicator).inc(
            int(pc.sum(stats.column("forced")).as_py() or 0)
        )
        if self.clock_due_file and decided.clock_ms is not None:
            # Last, once the batch's copies and advisories are out: the planner moves the clock
            # next when this says (replicator.spark.clock_due).
            write_clock_due(self.clock_due_file, ClockDue(decided.clock_ms, decided.due_ms))
        result.seconds = time.monotonic() - started
        self.ordered.account(result)
        self.ordered.log.debug(
            BATCH_TIMES_LINE, batch_id, result.received, result.copied, advs.num_rows,
            collected - started, copies_s, advisories_s, result.seconds,
        )  # fmt: skip

    def _replayed_subjects(self, decided: DecidedBatch) -> list[tuple[int, str]]:
        """(source sequence, subject) of every copy of a batch that replays a failed publish,
        when the target keeps N messages a subject and holds some of what it sent (none
        otherwise): a copy of one part left out as pushed out must count the later parts'
        copies on its subject too. Read from the source ahead of the parts (again for each
        such replay: they are rare, and only these two columns are kept)."""
        unacked = self._unacked
        if unacked is None or unacked.seqs.isdisjoint(decided.copies) or not self._held(unacked):
            return []
        if not self._keeps_n_a_subject():
            return []  # nothing is pushed out: no check counts them
        return [
            pair
            for part in self._copies(decided)
            for pair in zip(part.column("seq").to_pylist(), copied_subjects(part), strict=True)
        ]

    def _keeps_n_a_subject(self) -> bool:
        """Whether the target keeps a number of messages a subject (or cannot say)."""
        o = self.ordered

        async def limit() -> int:
            info = await stream_info(await o.connection(), o.settings.target_stream)
            return int(info.config.max_msgs_per_subject or 0) if info is not None else 0

        try:
            return self.loop.run(limit(), 30) > 0
        except Exception:
            return True  # counted: the checks themselves find out

    def _publish_copies(self, part: pa.Table, on_subjects: list[tuple[int, str]]) -> BatchResult:
        """Publish copies (ordered.publish_table); in a replay of what a publish that failed
        sent, leave out those the target holds, and publish the rest unchained: the target
        may hold later ones (a copy lost at a clustered target's leader change, the next one
        stored), and a chained publish would go on after its last copy, past them."""
        seqs = part.column("seq")
        sent = set(seqs.to_pylist())
        unacked = self._unacked
        replay = unacked is not None and not sent.isdisjoint(unacked.seqs)
        started_ns = time.time_ns()
        try:
            if not replay:
                return self.ordered.publish_table(part)
            assert unacked is not None
            o = self.ordered
            held = self._held(unacked)
            keep = pc.greater(seqs, o.floor)  # at or below: acknowledged since
            if not unacked.sink_floor_vouches:
                # The floor is the target's last copy (a restart, a takeover): what the failed
                # publishes sent below it is there only if `held` says so.
                sent_seqs = pa.array(sorted(unacked.seqs), type=seqs.type)
                keep = pc.or_(keep, pc.is_in(seqs, value_set=sent_seqs))
            if held:
                held_seqs = pa.array(sorted(held), type=seqs.type)
                keep = pc.and_(keep, pc.invert(pc.is_in(seqs, value_set=held_seqs)))
            rest = self._not_pushed_out(part.filter(keep), held, on_subjects)
            left_out = part.num_rows - rest.num_rows
            if left_out:
                o.log.info("left out %d copies the target holds, of a batch that failed", left_out)
            result = o.publish_unchained(rest) if rest.num_rows else BatchResult()
            # Every copy of the part is in the target now (held, published, or deliberately
            # left out): a replay of the batch (a later part failed) must not publish them
            # again, neither as named by the record nor as above the floor (publish_unchained
            # moved it to the end of what it published only).
            o.handled_up_to(max(sent))
            self._keep(unacked.settled_up_to(max(sent)))
            return result
        except BaseException:
            u, floor = self._unacked, self.ordered.floor
            u = (
                first_failure(sent, floor, started_ns)
                if u is None
                else u.after_failure(sent, floor, started_ns)
            )
            try:
                self._keep(u)
            except OSError as e:
                self._unacked = u  # this process still replays it
                self.ordered.log.error("could not write %s (%s): a kill before the replay loses it",
                                       self._record.path if self._record else "", e)  # fmt: skip
            raise

    def _held(self, unacked: Unacked) -> dict[int, int]:
        """Which of what failed publishes sent the target holds: source sequence -> target
        sequence (read once per failure; none when it cannot tell: then they go again, twice
        rather than lost)."""
        if unacked.held is not None:
            return unacked.held
        o = self.ordered

        async def held_copies() -> dict[int, int] | None:
            nc = await o.connection()
            lo, hi = min(unacked.seqs), max(unacked.seqs)
            return await copies_in_range(
                nc, o.settings.target_stream, o.settings.owner, lo, hi, unacked.since_ns, wanted=unacked.seqs
            )

        try:
            found = self.loop.run(held_copies(), None)  # each read has its timeout
        except Exception as e:  # never a stall: a replay that cannot read the target goes on
            found, why = None, f"{type(e).__name__}: {e}"
        else:
            why = "over 200,000 messages to read, or none found from when it was sent"
        if found is None:
            o.log.warning(
                "could not tell which of %d copies a failed publish sent the target holds (%s): publishing them "
                "again (past its duplicate window, those it holds are stored twice)",
                len(unacked.seqs),
                why,
            )
        unacked.held = found or {}
        return unacked.held

    def _not_pushed_out(
        self, rest: pa.Table, held: dict[int, int], on_subjects: list[tuple[int, str]]
    ) -> pa.Table:
        """`rest` without the copies the target stored and then pushed out under its limit of
        messages a subject (gap_fill.pushed_out_copies), counting the batch's copies in
        `on_subjects`: not found among those it holds, and published again they would put an
        old value after a newer one."""
        if not held or not rest.num_rows:
            return rest
        rows = zip(rest.column("seq").to_pylist(), copied_subjects(rest), strict=True)
        gone = pushed_out_copies(self.loop, self.ordered, rows, held, counted=on_subjects)
        if not gone:
            return rest
        seqs = rest.column("seq")
        return rest.filter(pc.invert(pc.is_in(seqs, value_set=pa.array(sorted(gone), type=seqs.type))))

    def _copies(self, decided: DecidedBatch) -> Iterator[pa.Table]:
        """The messages to copy, read back from the source in order, a chunk at a time (the
        batch's rows carry no payloads: see replicator.spark.rows.to_sampling_batch). Copies
        close together are read as a range, far apart one by one (replicator.copy_reads). Each
        must be the message the rules saw (stored at its time in `decided`), or the batch fails."""
        seqs = decided.copies
        if not seqs:
            return
        try:
            # A source that cannot be reached: the batch fails.
            one_by_one = self.loop.run(self.source.allows_direct(), 60)
        except SourceStreamGone as e:
            raise PublishError(f"{e}; its copies cannot be published") from None
        wanted = dict(zip(seqs, decided.copy_times_ms, strict=True))
        found = 0
        for read in plan_reads(seqs, decided.copy_sizes, one_by_one):
            chunks = (
                self.source.chunks(read.first, read.last + 1)
                if isinstance(read, Span)
                else self.source.each(read.seqs, read.sizes)
            )
            # Each chunk is read while the caller publishes the one before (the source and the
            # target are other connections): when every sender falls due at once, most of a
            # batch is copies, and the reads and publishes otherwise wait in turn.
            ahead: asyncio.Task[list[RawMessage] | None] | None = None
            try:
                while True:
                    try:
                        # Reads time out themselves. The next read starts before this returns:
                        # a chunk that fails the check below leaves it to _closed.
                        chunk, ahead = self.loop.run(_next_chunk(chunks, ahead), timeout=None)
                    except SourceStreamGone as e:
                        raise PublishError(f"{e}; its copies cannot be published") from None
                    if chunk is None:
                        break
                    kept = [m for m in chunk if m.seq in wanted]
                    self._same_as_decided(kept, wanted)
                    found += len(kept)
                    if kept:
                        yield pa.Table.from_batches(
                            [to_record_batch(self.ordered.settings.source_stream, kept)]
                        )
            finally:
                # A publish that failed (or a stop) leaves a read ahead: ended before the reader.
                self.loop.run(_closed(chunks, ahead), 10)
        if found < len(seqs):
            # Removed from the source (its limits, or by hand) between Spark's read and now.
            self.ordered.log.warning("%d of %d copies were no longer in the source stream when read for publishing",
                                     len(seqs) - found, len(seqs))  # fmt: skip

    def _same_as_decided(self, read: list[RawMessage], wanted: dict[int, int]) -> None:
        """Raise unless each message read back is the one the rules decided on: a sequence
        stored at another time belongs to a stream deleted and created again since Spark read
        it (the planner's check comes before the read, this one after). Published, it would be
        another message under this one's sequence and id."""
        for m in read:
            if m.ts_ns // 1_000_000 != wanted[m.seq]:
                raise PublishError(
                    f"source stream {self.ordered.settings.source_stream}: sequence {m.seq} now holds a message "
                    f"stored at {m.ts_ns // 1_000_000} ms, not the one the batch decided on (stored at "
                    f"{wanted[m.seq]} ms): the stream was deleted and created again; nothing of it is copied "
                    "and the batch will be retried"
                )

    async def _advise(self, advs: pa.Table) -> None:
        advisories = list(
            zip(
                advs.column("subject").to_pylist(),
                advs.column("data").to_pylist(),
                advs.column("event_id").to_pylist(),
                strict=True,
            )
        )
        await publish_advisories(await self.source.connection(), advisories, self.p.advisory_reliable)

    def close(self) -> None:
        self.ordered.close()
        try:
            self.loop.run(self.source.close(), 5)
        except Exception as e:
            log.debug("closing the source connection: %s", e)
