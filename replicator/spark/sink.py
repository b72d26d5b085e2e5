"""The ordered sink: publishes each micro-batch to the target stream in source order.

Used through `foreachBatch`: the batch is collected to the driver as Arrow (partitions come
back in sequence order) and published on one connection with pipelined JetStream acks. The
batch returns only when every message is acknowledged; any failure raises, so the micro-batch
is not committed and is replayed. Replays are harmless: each copy carries a deterministic
`Nats-Msg-Id` (the target's duplicate window drops it) and nothing at or below the highest
sequence already in the target is published again.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import contextlib
import enum
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.aio import LoopThread
from replicator.headers import (
    EXPECTED_LAST_MSG_ID_HEADER,
    EXPECTED_LAST_SEQUENCE_HEADER,
    MSG_ID_HEADER,
    SOURCE_HEADER,
    CopyOwner,
    format_source_header,
    is_copied,
    message_id,
    parse_source_header,
)
from replicator.logs import stream_logger
from replicator.metrics import MetricLabels, metrics
from replicator.nats.client import ReplicatorClient
from replicator.nats.connect import open_connection
from replicator.nats.jetstream import TargetLimits, last_message, stream_info, target_limits
from replicator.nats.publisher import PipelinedPublisher, PublishError, PublishOutcome
from replicator.nats.tls import TLSFiles
from replicator.nats.wire import HEADER_FRAME, encode_read_header_lines, first_value, readable, wire_bytes
from replicator.spark.inflight import InflightRecord
from replicator.spark.rows import copied_headers, copied_subjects
from replicator.subjects import rewrite_subject, subjects_matcher

log = logging.getLogger(__name__)

# Strict order when one publish fails mid-pipeline: each copy says what the target's last
# message must be (the copy before it), so once one is refused or lost the server refuses every
# later one too, and the target never holds a copy after a gap.
# - On a single server, by message id: a refused copy's id never becomes the last, so nothing
#   lines up again, even when another writer's messages land in between.
# - On a clustered stream, by sequence: there the id is checked again when the replicas apply
#   the copy, and one refused copy was a "critical write error" on every replica that left the
#   stream without a leader for good (nats-server 2.15; test_sink_order on an R3 target). Its
#   leader checks the sequence before replicating. A refused copy does not move the sequence,
#   so another writer's message lines the next copy up again: each copy is acknowledged there,
#   and a copy stored after a refused one means another writer (see _publish_all).
EXPECTED_LAST_MSG_ID = EXPECTED_LAST_MSG_ID_HEADER.encode() + b": %s\r\n"
EXPECTED_LAST_SEQUENCE = EXPECTED_LAST_SEQUENCE_HEADER.encode() + b": %d\r\n"
WRONG_LAST = (10070, 10071)  # JetStream's error codes when those checks fail
# Chained copies ask for an ack every this many (and the last of a batch): an ack that says
# stored vouches for the copies before it (replicator.nats.publisher). A failure is then found
# by the target's tail and the copies after it published again, each acknowledged.
CHAINED_ACK_EVERY = 256
# How long a clustered target whose last message is someone else's is watched, before chaining,
# for another writer's messages.
TARGET_MOVING_S = 0.25


@dataclass
class BatchResult:
    received: int = 0
    received_bytes: int = 0
    copied: int = 0
    copied_bytes: int = 0
    too_old: int = 0
    duplicates: int = 0
    last_seq: int = 0
    seconds: float = 0.0


class SinkClosed(RuntimeError):
    """A publish asked of a sink already closed for a stop."""

    def __init__(self) -> None:
        super().__init__("the target connection was closed for a stop; nothing more is published")


@dataclass
class SinkSettings:
    target_url: str
    target_stream: str
    source_stream: str
    replicator: str
    config_name: str
    stream_identity: str
    subject_prefix: str = ""
    subject_remove: str = ""
    max_age_seconds: float | None = None
    tls: TLSFiles | None = None
    max_pending: int = 4000
    ack_timeout: float = 30.0
    # Chain copies with Nats-Expected-Last-Sequence (the config's chain_copies).
    chain: bool = True
    # A leader-elected entry's copies are its election's, whichever instance made them (each
    # may have its own top-level name): see headers.CopyOwner.
    elected: bool = False

    @property
    def owner(self) -> CopyOwner:
        """Which copies in the target are this entry's."""
        identity = self.stream_identity if self.elected else ""
        return CopyOwner(
            self.source_stream, self.replicator, self.config_name, identity, self.stream_identity
        )


_COPY_LINES = b"%s" + SOURCE_HEADER.encode() + b": %s\r\n" + MSG_ID_HEADER.encode() + b": %s\r\n"


def copy_header_lines(s: SinkSettings, seq: int, own: Any, ts_ms: int, msg_id: str) -> bytes:
    """A copy's header lines: the source message's own (see headers.is_copied), then its
    Choria-SR-Source and Nats-Msg-Id (`msg_id`, `message_id(s.stream_identity, seq)`)."""
    kept = encode_read_header_lines([(k, v) for k, v in own if is_copied(k)]) if own else b""
    source = format_source_header(s.source_stream, seq, s.replicator, s.config_name, ts_ms)
    return _COPY_LINES % (kept, source.encode(), msg_id.encode())


def _above(table: pa.Table, seq: int) -> pa.Table:
    """The rows of `table` whose source sequence is above `seq`."""
    if table.num_rows == 0 or int(pc.min(table.column("seq")).as_py()) > seq:
        return table
    return table.filter(pc.greater(table.column("seq"), seq))


def _ascending(seqs: Any) -> bool:
    if len(seqs) < 2:
        return True
    return bool(pc.all(pc.greater(seqs.slice(1), seqs.slice(0, len(seqs) - 1))).as_py())


# Attempts at one batch: a broken chain or another writer's message costs one more each.
PUBLISH_ATTEMPTS = 4


class Settled(enum.Enum):
    """What one publish attempt's acks lead to (OrderedSink._settle)."""

    DONE = "every copy stored"
    # A sparse ack failed: which copies before it were stored is read from the target's tail.
    AGAIN_FROM_THE_TAIL_EACH_ACKED = "again from the target's last copy, each copy acknowledged"
    # A chained copy was refused because the target's last message was not the one before it.
    AGAIN_AFTER_THE_STORED = "again after the copies stored"


@dataclass
class BatchCopies:
    """One batch's rows as the copies they become: the columns taken out once, each copy's
    subject and header lines made as it is handed to the publisher, and the first row that
    cannot be copied whatever the order (too large, a subject the target does not hold)."""

    settings: SinkSettings
    limits: TargetLimits
    covered: Callable[[str], bool] | None  # the target's subjects (None: not known)
    subjects: list[str]
    seqs: list[int]
    ts_ms: list[int]
    headers: list[Any]
    datas: list[bytes]
    held: str | None = None  # why publishing stopped before a row, or the fence cut it (see stop)
    last_id: str = ""  # the Nats-Msg-Id of the last copy handed over in this attempt

    @classmethod
    def of(
        cls, table: pa.Table, s: SinkSettings, limits: TargetLimits, covered: Callable[[str], bool] | None
    ) -> BatchCopies:
        return cls(
            s,
            limits,
            covered,
            copied_subjects(table),
            table.column("seq").to_pylist(),
            pc.divide(pc.cast(table.column("timestamp"), pa.int64()), 1000).to_pylist(),
            copied_headers(table),
            table.column("data").to_pylist(),
        )

    def stop(self, why: str) -> None:
        """No copy after this point in the batch: the first reason given is the one reported."""
        if self.held is None:
            self.held = why

    def first_above(self, floor: int, start: int) -> int:
        """The first row from `start` on whose source sequence is above `floor`."""
        while start < len(self.seqs) and self.seqs[start] <= floor:
            start += 1
        return start

    def messages(
        self, start: int, chain: tuple[str, int] | None, by_sequence: bool
    ) -> Iterator[tuple[str, bytes, bytes]]:
        """(subject, data, header lines) of each copy from row `start`. `chain`: the target's
        last message before this attempt (its Nats-Msg-Id and sequence; None: unchained), each
        copy then expecting the one before it, by sequence on a clustered target."""
        s, limits = self.settings, self.limits
        size_limit, size_setter = limits.size_limit()
        prev = chain[0] if chain is not None else ""
        for i in range(start, len(self.seqs)):
            subject = rewrite_subject(self.subjects[i], s.subject_prefix, s.subject_remove)
            seq, data = self.seqs[i], self.datas[i]
            msg_id = message_id(s.stream_identity, seq)
            lines = copy_header_lines(s, seq, self.headers[i], self.ts_ms[i], msg_id)
            if chain is not None and by_sequence:
                lines += EXPECTED_LAST_SEQUENCE % (chain[1] + i - start)
            elif prev:
                lines += EXPECTED_LAST_MSG_ID % wire_bytes(prev)
            size = len(lines) + HEADER_FRAME + len(data)
            if size > size_limit:
                self.stop(
                    f"source sequence {seq} is {size} bytes with its headers, above the {size_setter} "
                    f"({size_limit} bytes): raise that limit on the target"
                )
                return
            if self.covered is not None and not self.covered(subject):
                self.stop(
                    f"source sequence {seq} would be copied to subject {readable(subject)}, which target stream "
                    f"{s.target_stream} does not hold (its subjects: {', '.join(limits.subjects)}): add it "
                    "to the stream's subjects or set target_subject_prefix/target_subject_remove"
                )
                return
            self.last_id = msg_id
            if chain is not None:
                prev = msg_id
            yield subject, data, lines


# While a leader publishes, its lease is looked at this often: once it has ended, whatever the
# connection has not sent yet is dropped (replicator.nats.client.discard_unsent). Half the
# 0.1 s docs/operations.md promises, so a busy event loop still keeps it.
FENCE_POLL_S = 0.05


async def _fence_watch(nc: ReplicatorClient, fence: Callable[[], bool], copies: BatchCopies) -> None:
    """The lease as a fence: a publish waiting on a slow or stalled target (back-pressure, the
    client's and the kernel's buffers) must not land once the lease has ended, when another
    instance may lead. Each copy is checked before it is handed to the connection; this drops
    what was handed over but not yet sent, within FENCE_POLL_S of the lease's end."""
    while True:
        await asyncio.sleep(FENCE_POLL_S)
        if not fence():
            copies.stop(
                "not the leader any more: the lease ended while publishing; what was not sent was dropped"
            )
            nc.discard_unsent()
            return


class OrderedSink:
    """Callable for `foreachBatch(sink)`; keeps its target connection across batches."""

    def __init__(
        self,
        settings: SinkSettings,
        loop: LoopThread,
        floor: int = 0,
        inflight: InflightRecord | None = None,
    ) -> None:
        self.settings = settings
        self.loop = loop
        self.log = stream_logger(__name__, f"{settings.source_stream}/{settings.config_name}")
        # Where the batch being published is recorded until acknowledged (None: publish in the
        # foreachBatch call itself; the sampling sink does, its decisions are not re-derivable).
        self.inflight = inflight
        self._pending: Future[None] | None = None
        # Guards forgetting a publish waited for against setting the next one: a waiter outside
        # `publishing` (the live copies) must not forget a publish submitted just after its own.
        self._pending_lock = threading.Lock()
        # A background publish's error, kept until catch_up has published its batch again:
        # whoever publishes next raises it, so no later batch goes out past the failed one's
        # copies (the live copier and the query both publish: replicator.live_copies).
        self._failed: BaseException | None = None
        # One caller at a time from the wait for the last batch's acks to the next batch's
        # start (the query's batches, the copies ahead and the live copies).
        self.publishing = threading.RLock()
        # Set by close(): no batch starts after it, and no connection opens once it closed the
        # one it had (see there).
        self._closed = False
        self._disconnected = False
        # Highest source sequence known to be in the target, or deliberately skipped: never
        # published again. Only this sink moves it, and only up (handled_up_to): the live mark
        # and a stop's mark read it from other threads, while a publish may be under way.
        self._floor = floor
        # publish_unchained's rows go out whether or not they are above the floor: its own
        # floor, just below them, is the one its publish selects by (see _publish_floor).
        self._unchained_floor: int | None = None
        # Leader election: whether this instance may publish now (None: always). Asked before
        # every 256th copy, so a batch begun as the leader stops when its lease ends.
        self.may_publish: Callable[[], bool] | None = None
        self._nc: ReplicatorClient | None = None
        self._publisher: PipelinedPublisher | None = None
        self._landed_before = 0  # what publishers dropped since had landed
        self._limits: TargetLimits | None = None  # read with each new publisher
        self._covered = subjects_matcher([])
        # Whether others publish to the target too: then copies are not chained (see
        # EXPECTED_LAST_SEQUENCE); found out when a chain breaks on someone else's message.
        self.shared_target = not settings.chain
        # The target's last message (its Nats-Msg-Id and sequence); None: ask it.
        self._tail: tuple[str, int] | None = None
        # Our last copy known stored, for the live mark (see known_copy).
        self._known_copy: tuple[int, int] | None = None
        self._copies_unnoted = False  # the floor moved past copies stored after _known_copy
        self.labels = MetricLabels(settings.source_stream, settings.replicator, settings.config_name)
        self.totals = BatchResult()
        self.batches = 0  # handled (published or skipped) since this process started
        # Reads a small batch in the driver, given its id (None from it, or unset: Spark reads
        # the batch); see replicator.spark.small_batches.
        # The sequence above which a batch is read (see __call__).
        self.small_batches: Callable[[int, int], pa.Table | None] | None = None
        # Whether a batch's read leaves out what the target holds (replicator.live_copies).
        self.reads_above_floor = False
        # The last source sequence handed to a publish, its acks perhaps still to come.
        self._submitted = 0

    async def connection(self) -> ReplicatorClient:
        """The sink's target connection (opened if need be, unless the sink was closed)."""
        if self._nc is None or self._nc.is_closed:
            self._check_connected()  # a catch-up, gap fill or publish the stop gave up on
            nc = await open_connection(
                self.settings.target_url, self.settings.tls, name=f"sr-target-{self.settings.config_name}"
            )
            if self._disconnected:  # closed for a stop while this one opened
                await nc.close()
                self._check_connected()
            self._nc = nc
        return self._nc

    def _check_connected(self) -> None:
        if self._disconnected:
            raise SinkClosed()

    @property
    def floor(self) -> int:
        """The highest source sequence handled: in the target, or deliberately skipped."""
        return self._floor

    def handled_up_to(self, seq: int, copies_noted: bool = False) -> None:
        """Every source sequence up to `seq` is in the target or deliberately skipped (a batch
        settled, a range published again, the target's last copy found at a takeover).
        `copies_noted`: the copies it covers were noted (_note_copy) or none was made; if not
        (copies found in the target, say), the last copy known may be older than some of them,
        and none is known (no live mark is written) until a later one is noted."""
        if seq > self._floor and not copies_noted:
            self._copies_unnoted = True  # before the floor moves: a mark's writer reads it after
        self._floor = max(self._floor, seq)

    @property
    def _publish_floor(self) -> int:
        """What the publish under way leaves out as in the target: the floor, or in
        publish_unchained, what is below its rows. Fixed for the publish: an unchained publish
        makes one attempt (a refusal raises), which moves past its stored rows by their index."""
        return self._floor if self._unchained_floor is None else self._unchained_floor

    def show_handled(self, seq: int) -> None:
        """Set the stream_sequence gauge where a query starts, to `seq`, known handled with
        everything before it (copies and advisories out): a batch with messages sets it
        otherwise, and a restart with nothing new to read would show none."""
        if seq > 0:
            self.labels.of(metrics().sequence).set(seq)

    @property
    def landed(self) -> int:
        """Copies the target stored since this sink started, failed batches included."""
        return self._landed_before + (self._publisher.landed if self._publisher else 0)

    async def _drop_publisher(self) -> None:
        publisher, self._publisher = self._publisher, None
        self._limits = None  # read again with the next publisher: the stream may have changed
        if publisher is not None:
            self._landed_before += publisher.landed
            with contextlib.suppress(Exception):  # a connection being lost: its subscriptions go with it
                await publisher.close()

    async def target_answers(self) -> bool:
        """Whether the target stream can be looked up now (connecting if need be)."""
        return await stream_info(await self.connection(), self.settings.target_stream) is not None

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        """One micro-batch. With an in-flight record this returns once the batch is recorded
        and its publishing started, so Spark reads the next batch while this one is published;
        the previous batch must have been fully acknowledged first (or this batch fails)."""
        started = time.monotonic()
        # Copied live, most of a batch is in the target already, or being published: not read
        # again. The batch waits for that publish before its own (publish_rows), and fails if it
        # failed, so what it left out is in the target whenever it commits. The floor may move
        # on meanwhile (the last publish's acks): select() drops what it passed.
        above = max(self.floor, self._submitted) if self.reads_above_floor else 0
        table = self.small_batches(batch_id, above) if self.small_batches is not None else None
        if table is None:
            table = batch_df.toArrow()
        else:
            self.labels.of(metrics().driver_read_batches).inc()
        collected = time.monotonic()
        if table.num_rows == 0 and not self.leading():
            return  # a standby's query (replaying a batch at start) reads nothing: nothing to do
        result = self.publish_rows(table, started)
        self.log.debug(
            "batch %d: %d rows, collect %.3fs, then %.3fs",
            batch_id,
            result.received,
            collected - started,
            time.monotonic() - collected,
        )

    def publish_rows(self, table: pa.Table, started: float) -> BatchResult:
        """Publish a batch's rows (or rows read ahead of the query: replicator.head_start) as
        one batch: recorded in flight first where there is a record, and returning once their
        publishing started; the previous batch must have been fully acknowledged first."""
        with self.publishing:
            return self._publish_rows(table, started)

    def _publish_rows(self, table: pa.Table, started: float) -> BatchResult:
        self._check_open()
        self.check_leader()
        if self.inflight is None:
            result = self.publish_table(table)
            result.seconds = time.monotonic() - started
            self.account(result)
        else:
            self.wait_published()
            self._check_open()  # closed while the last batch's acks were awaited
            if self.reads_above_floor:
                # Copied live, the query's batches and the live copies both read the source:
                # what one handled after the other's read is counted by the one that handled it
                # (received once, not skipped by the other).
                table = _above(table, self.floor)
            todo, result = self.select(table)
            if todo.num_rows:
                # A chain by sequence (a clustered target, or one not yet looked at) can leave a
                # copy after a gap when a foreign message lines it up: its range is checked too.
                gaps_possible = self.shared_target or self._limits is None or self._limits.replicas > 1
                self.inflight.write(int(todo.column("seq")[0].as_py()), result.last_seq, gaps_possible)
                pending = self.loop.submit(self._publish_and_settle(todo, result, started))
                with self._pending_lock:
                    self._pending = pending
                self._submitted = max(self._submitted, result.last_seq)
            else:
                self.handled_up_to(result.last_seq, copies_noted=True)  # none to publish
                result.seconds = time.monotonic() - started
                self.account(result)
        return result

    async def _publish_and_settle(self, todo: pa.Table, r: BatchResult, started: float) -> None:
        outcome = await self._publish(todo)
        r.duplicates = outcome.duplicates
        # Accounted here, on the loop thread, before the future completes: whoever waits on it
        # sees the floor and the totals already moved. Its copies were settled (and noted) by
        # their attempts; the rows after the last are skipped ones.
        self.handled_up_to(r.last_seq, copies_noted=True)
        r.seconds = time.monotonic() - started
        self.account(r)
        if self.inflight is not None:
            self.inflight.clear()

    def wait_published(self, timeout: float | None = None) -> None:
        """Wait until the batch being published is acknowledged; raise its error if it failed.
        Past `timeout` it is still being published, and the next batch still waits for it (its
        in-flight record must not be replaced while it may yet land). A failed batch's error is
        raised again to every caller until catch_up has published it again (failure_settled)."""
        if self._failed is not None:
            raise self._failed
        pending = self._pending
        if pending is None:
            return
        try:
            pending.result(timeout)
        except concurrent.futures.TimeoutError:
            raise
        except BaseException as e:
            # Only this publish is forgotten and kept as the failure: another caller may have
            # taken it already (and catch_up settled it since).
            with self._pending_lock:
                if self._pending is pending:
                    self._pending, self._failed = None, e  # its in-flight record stays
            raise
        with self._pending_lock:
            if self._pending is pending:
                self._pending = None

    @property
    def known_copy(self) -> tuple[int, int] | None:
        """The last of this entry's copies known stored in the target (its tail as read, or
        the last an attempt's acks said was stored): (its source sequence, its target sequence);
        None when none is known yet, or the floor has covered copies since that may have been
        stored after it. A target that still holds it holds every copy stored before it: a copy
        the floor covers was noted here before the floor moved past it."""
        return None if self._copies_unnoted else self._known_copy

    def _note_copy(self, source_seq: int, target_seq: int) -> None:
        # By target sequence: a copy published again after a gap is stored after higher ones.
        if target_seq <= 0:
            return
        if self._known_copy is None or target_seq > self._known_copy[1]:
            self._known_copy = (source_seq, target_seq)
        # Stored now (an ack, the tail as read): after any copy the floor covered unnoted, which
        # were in the target before.
        self._copies_unnoted = False

    def still_publishing(self) -> bool:
        """Whether a background publish has not ended yet."""
        return self._pending is not None and not self._pending.done()

    def failure_settled(self) -> None:
        """What the failed batch left in flight is published again (catch_up): publishing may
        go on."""
        self._failed = None

    def publish_failed(self) -> BaseException | None:
        """The error of a background publish that failed (None while running or fine)."""
        if self._failed is not None:
            return self._failed
        p = self._pending
        if p is None or not p.done() or p.cancelled():
            return None
        return p.exception()

    def forget_target_tail(self) -> None:
        """Another instance may have written to the target since this one last published: read
        its tail again (and whether others write to it) before the next publish."""
        self._tail = None
        self.shared_target = not self.settings.chain

    def leading(self) -> bool:
        """Whether this instance may publish now (see may_publish)."""
        return self.may_publish is None or self.may_publish()

    def check_leader(self) -> None:
        """Raise unless this instance may publish (see may_publish)."""
        if not self.leading():
            raise PublishError("not the leader any more: this batch is left to the new leader")

    def publish_table(self, table: pa.Table, now: float | None = None) -> BatchResult:
        """Publish, and wait for, the rows `select` keeps."""
        todo, r = self.select(table, now)
        if todo.num_rows:
            outcome = self.loop.run(self._publish(todo), timeout=None)
            r.duplicates = outcome.duplicates
        # Every row of the batch is now handled (copied and noted as settled, or skipped).
        self.handled_up_to(r.last_seq, copies_noted=True)
        return r

    def republish(self, table: pa.Table) -> BatchResult:
        """Publish rows read again from the source (what an earlier run left in flight), and
        count them like any batch."""
        result = self.publish_table(table)
        self.account(result)
        return result

    def fill_gaps(self, table: pa.Table) -> BatchResult:
        """Publish rows read again from the source that the target lacks below its last copy of
        ours (a gap an unchained batch left when it failed), counted like any batch."""
        result = self.publish_unchained(table)
        self.account(result)
        return result

    def publish_unchained(self, table: pa.Table) -> BatchResult:
        """publish_table, every row (not only those above the floor) and unchained: for copies
        the target may hold later ones of, where a chained publish would read its tail and go
        on after that, past them. The floor stays where it was, or moves to the rows' end."""
        shared = self.shared_target
        below = int(pc.min(table.column("seq")).as_py()) - 1  # handled, the caller says
        # Not by lowering the floor: read meanwhile (a stop's mark, the live mark), a floor below
        # copies already acknowledged would send a start that cannot see the target's tail back
        # over them, storing them again.
        self._unchained_floor, self.shared_target = below, True
        try:
            return self.publish_table(table)
        finally:
            self._unchained_floor, self.shared_target = None, shared
            self.handled_up_to(below)  # as when its first row is stored, even if none was

    def select(self, table: pa.Table, now: float | None = None) -> tuple[pa.Table, BatchResult]:
        """The rows of `table` to publish, in seq order: above the floor and fresh enough."""
        r = BatchResult(received=table.num_rows)
        if table.num_rows == 0:
            return table, r
        r.received_bytes = int(pc.sum(pc.binary_length(table.column("data"))).as_py() or 0)
        seqs = table.column("seq")
        r.last_seq = int(pc.max(seqs).as_py())
        keep = pc.greater(seqs, self._publish_floor)
        if self.settings.max_age_seconds is not None:
            cutoff_us = int(((now or time.time()) - self.settings.max_age_seconds) * 1e6)
            fresh = pc.greater_equal(pc.cast(table.column("timestamp"), pa.int64()), cutoff_us)
            r.too_old = int(pc.sum(pc.and_(keep, pc.invert(fresh))).as_py() or 0)
            keep = pc.and_(keep, fresh)
        # Filtering and sorting copy every payload (profiled: 6% of the driver), so only when
        # needed. The batch comes ordered; the check guards against any operator that reorders.
        kept = int(pc.sum(keep).as_py() or 0)
        todo = table if kept == table.num_rows else table.filter(keep)
        if not _ascending(todo.column("seq")):
            todo = todo.sort_by("seq")
        r.copied = todo.num_rows
        r.copied_bytes = int(pc.sum(pc.binary_length(todo.column("data"))).as_py() or 0)
        return todo, r

    async def _publish(self, table: pa.Table) -> PublishOutcome:
        """Publish in order and wait for every ack, under one deadline for the whole batch."""
        try:
            return await self._publish_all(table)
        except PublishError:
            # The next attempt reads the target's limits and tail again: the operator may have
            # changed the stream meanwhile.
            await self._drop_publisher()
            raise
        except Exception as e:
            await self._drop_publisher()
            raise PublishError(
                f"publishing to target stream {self.settings.target_stream} failed: {e!r}; the batch will be retried"
            ) from e

    async def _publish_all(self, table: pa.Table) -> PublishOutcome:
        """Publish the rows in order; a refusal raises with the rows before it stored (the floor
        moved past them) and, unless the target has other writers, none after it. Up to
        PUBLISH_ATTEMPTS attempts, each from where the target's copies end (see _settle)."""
        nc, publisher, limits = await self._publisher_for_target()
        copies = BatchCopies.of(table, self.settings, limits, self._covered if limits.subjects else None)
        by_sequence = limits.replicas > 1  # a clustered target (see EXPECTED_LAST_MSG_ID)
        # Sparse acks only where a stored copy vouches for those before it (an id chain).
        ack_every = 1 if by_sequence else CHAINED_ACK_EVERY
        # A chained attempt into a clustered stream that takes them goes as one fast-ingest
        # batch: sparse acks that vouch for every copy before them, where a chain by sequence
        # alone cannot (1.3x the copies per second on R3; on a single server the id chain's
        # sparse acks are faster: docs/performance.md, 2026-11-26).
        fast = by_sequence and limits.batched
        start, duplicates = 0, 0
        for _ in range(PUBLISH_ATTEMPTS):
            await self._look_for_another_writer(nc, by_sequence)
            start = copies.first_above(self._publish_floor, start)  # the ones before are in the target
            chain = None if self.shared_target else self._tail
            self._tail = None  # unknown until this attempt is settled
            outcome = await self._send(publisher, nc, copies, start, chain, by_sequence, ack_every, fast)
            duplicates += outcome.duplicates
            next_step = await self._settle(nc, publisher, copies, outcome, start, chain, by_sequence)
            if next_step is Settled.DONE:
                outcome.duplicates = duplicates
                return outcome
            if next_step is Settled.AGAIN_FROM_THE_TAIL_EACH_ACKED:
                ack_every, fast = 1, False
            else:
                start += outcome.first_failure().index  # type: ignore[union-attr]
        raise PublishError(
            f"target stream {self.settings.target_stream} kept moving while we published; the batch will be retried"
        )

    async def _publisher_for_target(self) -> tuple[ReplicatorClient, PipelinedPublisher, TargetLimits]:
        """The target connection, its publisher, and the target's limits: read again whenever
        the connection or the publisher is new."""
        nc = await self.connection()
        if self._publisher is None or self._publisher.nc is not nc or self._limits is None:
            await self._drop_publisher()
            self._tail = None
            self._limits = await target_limits(nc, self.settings.target_stream)
            self._covered = subjects_matcher(list(self._limits.subjects))
            self._publisher = PipelinedPublisher(nc, self.settings.target_stream, self.settings.max_pending)
        return nc, self._publisher, self._limits

    async def _look_for_another_writer(self, nc: ReplicatorClient, by_sequence: bool) -> None:
        """Before a chained attempt: the target's tail, and on a clustered target whether
        another writer is storing messages right now."""
        if self.shared_target or self._tail is not None:
            return
        self._tail, ours = await self._target_tail(nc)
        if not ours and by_sequence and await self._target_moving(nc, self._tail[1]):
            # Someone else's message is last and others are still being stored: another writer,
            # found before chaining. On a clustered target a chain by sequence would not stop at
            # its messages: a refused copy takes no sequence, so a foreign message lines the next
            # copy up and it is stored after the refused one (test_target_refusals, R3). A foreign
            # tail that stays put (an old message) is chained from, as on a single server.
            self._another_writer()

    async def _send(
        self,
        publisher: PipelinedPublisher,
        nc: ReplicatorClient,
        copies: BatchCopies,
        start: int,
        chain: tuple[str, int] | None,
        by_sequence: bool,
        ack_every: int,
        fast: bool = False,
    ) -> PublishOutcome:
        """One attempt: the copies from row `start` on, chained to `chain` (the target's last
        message before it; None: unchained, each acknowledged), with the lease as a fence."""
        fence = self.may_publish
        copies.last_id = ""
        watch = asyncio.create_task(_fence_watch(nc, fence, copies)) if fence is not None else None
        try:
            return await publisher.publish(
                copies.messages(start, chain, by_sequence),
                self.settings.ack_timeout + (len(copies.seqs) - start) / 1000,
                ack_every if chain is not None else 1,
                fence,
                fast_batch=fast and chain is not None,
            )
        except PublishError:
            if copies.held:  # the fence cut the connection: say why
                raise PublishError(f"{copies.held}; nothing after it is copied") from None
            raise
        finally:
            if watch is not None:
                watch.cancel()

    async def _settle(
        self,
        nc: ReplicatorClient,
        publisher: PipelinedPublisher,
        copies: BatchCopies,
        outcome: PublishOutcome,
        start: int,
        chain: tuple[str, int] | None,
        by_sequence: bool,
    ) -> Settled:
        """What an attempt's acks mean: the floor moved past what they say was stored, then done,
        or another attempt and from where, or the batch fails (PublishError)."""
        seqs = copies.seqs
        first = outcome.first_failure()
        # Where one of these copies is stored, for the live mark (a start checks the target
        # still holds it there): the last an ack said was stored now (not a duplicate's, which
        # names an earlier copy), or a fast batch's last when the chain says where it went.
        noted = False
        if outcome.top_seq:
            self._note_copy(seqs[start + outcome.top_index], outcome.top_seq)
            # With sparse acks, the copies after the last one stored now are vouched for, not
            # acked: one a duplicate's ack vouched for may have been stored after it.
            noted = outcome.exact or not outcome.duplicates
        elif (
            chain is not None
            and not outcome.duplicates
            and outcome.last_seq == chain[1] + outcome.stored > chain[1]
        ):
            self._note_copy(seqs[start + outcome.stored - 1], outcome.last_seq)
            noted = True
        if first is None and outcome.last_seq and chain is not None:
            expected = chain[1] + outcome.published
            if outcome.last_seq != expected:
                # A fast batch whose final ack names another sequence than the chain gives: a
                # copy the leader took was not stored when its replicas applied it (a limit, a
                # leader change), or the last was already there. The range stays in flight and
                # is looked at for gaps (replicator.spark.inflight).
                if self.inflight is not None:
                    self.inflight.mark_unchained()
                raise PublishError(
                    f"target stream {self.settings.target_stream} acknowledged {outcome.published} copies "
                    f"ending at its sequence {outcome.last_seq}, not {expected}: a copy may be missing; "
                    "the batch will be retried and its range checked for gaps"
                )
        if first is not None and not outcome.exact:
            # Some copy at or before the failed ack was not stored: the target's tail says which
            # were, and the rest go again with an ack each, to show why if they fail.
            await self._tail_after_broken_chain(nc)
            landed = bisect.bisect_right(seqs, self._publish_floor, lo=start) - start
            publisher.landed += max(0, landed - outcome.stored)  # the acks vouched for fewer
            return Settled.AGAIN_FROM_THE_TAIL_EACH_ACKED
        stored = first.index if first is not None else outcome.published
        if stored:
            # Noted: a copy stored now, after these (its index is past theirs; a duplicate's
            # was stored before).
            self.handled_up_to(seqs[start + stored - 1], copies_noted=noted)
        if first is None:
            if chain is not None and copies.last_id and not outcome.duplicates:
                self._tail = (copies.last_id, chain[1] + outcome.published)  # each took the next sequence
            if copies.held:
                raise PublishError(f"{copies.held}; nothing after it is copied until then")
            return Settled.DONE
        if outcome.stored > stored and self.inflight is not None:
            self.inflight.mark_unchained()  # copies after the refused one were stored: a gap
        if first.code not in WRONG_LAST or chain is None:
            later = "; the messages after it were held back" if chain is not None else ""
            raise PublishError(
                f"target stream {self.settings.target_stream} refused source sequence "
                f"{seqs[start + first.index]}: {first.reason}{later}; the batch will be retried"
            )
        if by_sequence and outcome.stored > stored:
            # A copy after the refused one was stored: another writer's message lined the
            # sequence up again. Its tail would say our copies end past the refused ones: they
            # go again unchained after the ones stored (out of order, not lost).
            self._another_writer()
            return Settled.AGAIN_AFTER_THE_STORED
        # The target's last message was not the one we published before: read its tail.
        await self._tail_after_broken_chain(nc)
        return Settled.AGAIN_AFTER_THE_STORED

    async def _tail_after_broken_chain(self, nc: ReplicatorClient) -> None:
        """Where our copies in the target end (the floor), after a chained copy was refused;
        a tail that is not our copy means someone else writes there: chaining stops."""
        self._tail, ours = await self._target_tail(nc)
        if not ours:
            self._another_writer()

    def _another_writer(self) -> None:
        self.shared_target = True
        self._tail = None
        if self.inflight is not None:
            self.inflight.mark_unchained()  # from here the target may get copies after a gap
        self.log.warning(
            "target stream %s has another writer: publishing its copies unchained from now on, so order "
            "rests on the checks made before publishing (see docs/operations.md)",
            self.settings.target_stream,
        )

    async def _target_moving(self, nc: ReplicatorClient, last_seq: int) -> bool:
        """Whether the target stores messages past `last_seq` within TARGET_MOVING_S."""
        await asyncio.sleep(TARGET_MOVING_S)
        info = await stream_info(nc, self.settings.target_stream)
        return info is not None and int(info.state.last_seq) != last_seq

    async def _target_tail(self, nc: ReplicatorClient) -> tuple[tuple[str, int], bool]:
        """The target's last message (its Nats-Msg-Id, "" if none, and sequence) and whether it
        is our copy (or the target holds none); the floor moves to the source sequence of our
        copy."""
        s = self.settings
        info = await stream_info(nc, s.target_stream)
        if info is None:
            raise PublishError(f"target stream {s.target_stream} does not exist (deleted while copying?)")
        last_seq = int(info.state.last_seq)
        if info.state.messages == 0:
            return ("", last_seq), True
        last = await last_message(nc, info)
        if last is None:
            return ("", last_seq), True
        mark = parse_source_header(first_value(last.headers, SOURCE_HEADER))
        ours = s.owner.owns(mark, first_value(last.headers, MSG_ID_HEADER))
        if mark is not None and ours:
            self._note_copy(mark.sequence, last.seq)
            self.handled_up_to(mark.sequence, copies_noted=True)
        return (first_value(last.headers, MSG_ID_HEADER) or "", last.seq), ours

    def account(self, r: BatchResult) -> None:
        """Count a handled batch in the metrics and the totals."""
        m = metrics()
        lab = self.labels
        lab.of(m.received_msgs).inc(r.received)
        lab.of(m.received_bytes).inc(r.received_bytes)
        lab.of(m.copied_msgs).inc(r.copied)
        lab.of(m.copied_bytes).inc(r.copied_bytes)
        lab.of(m.skipped_msgs).inc(r.received - r.copied)
        lab.of(m.skipped_bytes).inc(r.received_bytes - r.copied_bytes)
        lab.of(m.too_old).inc(r.too_old)
        lab.of(m.duplicates).inc(r.duplicates)
        if r.last_seq:
            lab.of(m.sequence).set(r.last_seq)
        lab.of(m.batch_seconds).observe(r.seconds)
        m.processing_time.observe(lab.values(), r.received, r.seconds)
        t = self.totals
        t.received += r.received
        t.received_bytes += r.received_bytes
        t.copied += r.copied
        t.copied_bytes += r.copied_bytes
        t.too_old += r.too_old
        t.duplicates += r.duplicates
        t.last_seq = max(t.last_seq, r.last_seq)
        self.batches += 1

    def _check_open(self) -> None:
        if self._closed:
            raise SinkClosed()

    def close(self, grace: float = 10.0) -> None:
        """Wait (up to `grace` in all) for the batch being published, then close the connection.
        No batch starts and no connection opens after this: a copier the stop gave up waiting for
        (the copies ahead of the query, on a target slow to acknowledge) would otherwise reconnect
        and send copies after the stop wrote its mark of what the target acknowledged
        (replicator.live_mark), copies a start that cannot see the target's tail stores again."""
        self._closed = True  # first: a copier whose last acks come meanwhile sends no next batch
        due = time.monotonic() + grace
        held = self.publishing.acquire(timeout=max(0.0, grace))  # a publish under way hands over first
        try:
            self._close(max(0.0, due - time.monotonic()))
        finally:
            if held:
                self.publishing.release()

    def _close(self, grace: float) -> None:
        try:
            self.wait_published(grace)
        except Exception as e:  # its in-flight record stays: the next start publishes it
            self.log.warning("the last batch was not fully published (%s); it will be on the next start", e)
        # A publish under way until now may still have opened or reopened it; nothing from here.
        self._disconnected = True
        try:
            self.loop.run(self._disconnect(), 5)
        except Exception as e:  # closing must not mask the reason we stop
            log.debug("closing target connection: %s", e)

    async def _disconnect(self) -> None:
        # On the loop, as connection() is: an open that raced the flag (set before this) is
        # closed either here or by connection() itself.
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            await nc.close()
