"""`nats-jetstream`: a PySpark streaming data source that reads a JetStream stream.

    spark.dataSource.register(NatsJetStreamDataSource)
    df = (spark.readStream.format("nats-jetstream")
          .option("url", "nats://127.0.0.1:4222").option("stream", "ORDERS").load())

Its options are those of `replicator.options.ReaderOptions` (parsed there, in one place).

Offsets are stream sequences (`{"seq": next sequence to read}`) kept in Spark's checkpoint, so a
restarted query re-reads exactly the ranges it had not committed. Each micro-batch covers
`[start, end)`; the range is split into contiguous sub-ranges read in parallel by Spark tasks,
and the partitions come back in sequence order, so `collect()`/`toArrow()` of a batch is in
source order. A task hands Spark one Arrow batch per chunk it reads, so its memory is bounded by
the chunk, not by its range.

Sampling mode (`sampling=true` and a sender key): rows also carry `sender`, `force`, `bucket` (a
hash of the sender), `size` and `ts_ms`, and headers come as a JSON string. Each offset then
also holds the batch's event-time clock: the time of its last message, or once the reader has
caught up with the stream the time its leader read the stream at (STREAM.INFO's `ts`, less
CLOCK_TRAIL_MS); without new messages a batch then moves it when a sender's timeout or expiry is
due (replicator.spark.clock_due), at least every `clock_max_idle_ms`. Each batch carries one
clock row (seq < 0) per bucket, so every bucket sees time move. The clock is in the checkpointed offset, so a replayed batch sees the same
clock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from replicator.options import ReaderOptions
from replicator.spark.read_lease import ReadLease, batch_begin, batch_read_range, read_lease

# How far a caught-up batch's clock trails the time the stream was read (see _with_clock).
CLOCK_TRAIL_MS = 2_000

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

# A standby's query asks whether it leads this often (a file check): failover waits at most this.
STANDBY_POLL_S = 0.1
# A caught-up entry's plan waits this long at most for its doorbell (replicator.nats.doorbell)
# before it tells Spark there is nothing new (a sampled entry's, at most until its clock is due),
# plus RING_SETTLE_S after a ring; a stop waits for it at most that long too.
NEWS_WAIT_S = 0.2
# A wait shorter than this is not worth arming for: Spark asks again 10 ms after an empty plan.
MIN_NEWS_WAIT_S = 0.02
# Plans in a row that found news the doorbell, armed over DEAF_AFTER_S before, did not ring for
# before it is given up.
DEAF_AFTER_PLANS = 3
DEAF_AFTER_S = 1.0
# A ring can come before the stream counts the message that rang it (the server hands a stream
# its messages on a queue of its own, and a clustered stream counts one once its replicas
# agreed): after a ring the plan asks again, first after RING_RECHECK_S and then twice as long
# each time (a publish the stream refused rings too), for up to RING_SETTLE_S.
RING_SETTLE_S = 0.1
RING_RECHECK_S = 0.002
# A plan behind by more than a batch needs no request for the stream's end, but asks at least
# this often all the same: a stream deleted and created again is found within it, not only
# once the plans catch up with the end they knew.
INFO_AT_LEAST_S = 5.0

SCHEMA_DDL = (
    "stream STRING, seq BIGINT, subject STRING, timestamp TIMESTAMP, headers MAP<STRING, STRING>, data BINARY, "
    "header_bytes MAP<STRING, BINARY>, subject_bytes BINARY"
)
SAMPLING_SCHEMA_DDL = (
    "stream STRING, seq BIGINT, subject STRING, ts_ms BIGINT, headers STRING, data BINARY, "
    "sender STRING, force BOOLEAN, bucket INT, size INT"
)


class SequenceRange(InputPartition):
    """Messages with start <= seq < end."""

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        super().__init__((start, end))


class ClockRows(InputPartition):
    """One row per bucket carrying the batch's event-time clock."""

    def __init__(self, clock_ms: int, buckets: int) -> None:
        self.clock_ms = clock_ms
        self.buckets = buckets
        super().__init__(("clock", clock_ms))


class BatchRamp:
    """Batch sizes that start at `first` and double with every full batch, up to `cap`, and stay
    there: the first copy after a start does not wait for a full-size batch. They never shrink
    again: every batch pays a fixed cost (Spark's logs, and for a sampled stream a state
    rewrite), so a backlog that builds up again is read in full-size batches at once."""

    def __init__(self, first: int, cap: int) -> None:
        self.first = max(1, min(first, cap))
        self.cap = cap
        self.size = self.first

    def end(self, begin: int, available_end: int, limit: int) -> int:
        """End (exclusive) of the next batch starting at `begin` when the stream ends before
        `available_end` and the caller allows `limit` rows."""
        size = max(1, min(self.size, limit))
        if available_end - begin > size:
            self.size = min(self.size * 2, self.cap)
        return min(available_end, begin + size)


def split_range(start: int, end: int, parallelism: int, min_size: int) -> list[SequenceRange]:
    """Contiguous sub-ranges in order; small ranges stay whole (a task costs more than it saves)."""
    n = end - start
    if n <= 0:
        return []
    parts = max(1, min(parallelism, n // max(min_size, 1)))
    size = math.ceil(n / parts)
    return [SequenceRange(s, min(s + size, end)) for s in range(start, end, size)]


class SourceRecreatedError(RuntimeError):
    pass


def recreated_refusal(stream: str, where: str, now_us: int, expected_us: int, since: str) -> str:
    """The one line that refuses a source stream deleted and created again `since` (when its
    creation was `expected_us`)."""
    return (
        f"nats-jetstream: stream {stream} on {where} was deleted and created again since {since} "
        f"(created {_utc(now_us)}, not {_utc(expected_us)}): its checkpoint belongs to the old stream; "
        "stop the replicator, remove the entry's checkpoint under state_store and start it again "
        "to copy the new stream from its start (if it was restored from a backup of the same "
        f'messages, write {{"source_created_us": {now_us}}} into the checkpoint\'s sr-source.json '
        "instead of removing it)"
    )


def _utc(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="microseconds")


class NatsJetStreamReader(DataSourceStreamReader):
    def __init__(self, options: ReaderOptions) -> None:
        self.o = options
        self.stream = options.stream
        self.ramp = BatchRamp(options.first_batch_messages, options.max_messages_per_batch)
        self.extractor = options.sampling.extractor() if options.sampling else None
        self._direct: bool | None = None
        self._warned_reset = False
        self._warmed = False
        self._loop: Any = None
        self._nc: Any = None
        self._stream_end: int | None = None  # last sequence + 1, as last asked of the stream
        self._info_at = 0.0  # time.monotonic() when the stream was last asked
        # When the stream was last asked (ms, its leader's clock; None if the server does not
        # say): every message stored later has a later time.
        self._stream_time_ms: int | None = None
        self._mean_bytes = 0.0  # the stream's mean message size, as last asked
        self._subjects: list[str] = []  # the stream's subjects, as last asked
        self._bell: Any = None  # a Doorbell once the stream was caught up with
        self._bell_nc: Any = None  # the connection it listens on
        self._bell_given_up = False  # it heard nothing of a growing stream: polling
        # The last plan found nothing new: how long it may wait for news (0: it found some). A
        # sampled entry's wait ends when its event-time clock is due to move.
        self._idle_wait_s = 0.0
        self._news = False  # the last plan gave a batch to copy
        self._deaf = 0  # plans with news in a row that the armed doorbell did not ring for

    # The planner side (initialOffset/latestOffset/partitions) keeps one connection on a loop
    # thread; tasks get a pickled copy without it (a live connection cannot be pickled).
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_loop"] = None
        state["_nc"] = None
        state["_bell"] = None
        state["_bell_nc"] = None
        return state

    def _conn(self) -> tuple[Any, Any]:
        if self._nc is None or self._nc.is_closed:
            from replicator.aio import LoopThread
            from replicator.nats.connect import open_connection

            if self._loop is None:
                self._loop = LoopThread("nats-jetstream-planner")
            self._nc = self._loop.run(
                open_connection(self.o.url, self.o.tls, name=f"sr-planner-{self.stream}"), 60
            )
        return self._loop, self._nc

    def _info(self) -> Any:
        from replicator.nats.doorbell import hears_its_own_asks
        from replicator.nats.jetstream import stream_info_and_time

        loop, nc = self._conn()
        info, self._stream_time_ms = loop.run(stream_info_and_time(nc, self.stream), 30)
        self._info_at = time.monotonic()
        if info is None:
            raise RuntimeError(f"nats-jetstream: stream {self.stream} does not exist on {self._where()}")
        self._check_same_stream(info)
        self._direct = bool(info.config.allow_direct)
        # Messages a mirror or a sourcing stream takes from others arrive on no subject of its.
        fed = info.config.mirror is not None or bool(info.config.sources)
        subjects = list(info.config.subjects or [])
        self._subjects = [] if fed or hears_its_own_asks(subjects) else subjects
        messages = int(info.state.messages)
        self._mean_bytes = int(info.state.bytes) / messages if messages else 0.0
        return info

    def _check_same_stream(self, info: Any) -> None:
        """Raise when the stream is not the one the query started on: deleted and created
        again, its sequences are another stream's, and reading on from this query's offset
        would skip the new stream's first messages without a word."""
        from replicator.nats.jetstream import created_us

        expected, now = self.o.source_created_us, created_us(info)
        if expected and now and now != expected:
            raise SourceRecreatedError(
                recreated_refusal(self.stream, self._where(), now, expected, "this query started")
            )

    def _configured_start(self) -> int:
        """The first sequence of the query's first offset (0 when not given): a leader's first
        batch after a takeover never begins before it."""
        if not self.o.initial_offset:
            return 0
        return int(parse_initial_offset(self.o.initial_offset, "option initial_offset")["seq"])

    def _where(self) -> str:
        from replicator.nats.urls import parse_nats_url

        return parse_nats_url(self.o.url).redacted()

    def initialOffset(self) -> dict:
        if self.o.initial_offset:
            return parse_initial_offset(self.o.initial_offset, "option initial_offset")
        loop, nc = self._conn()
        return loop.run(choose_initial_offset(nc, self.o), 60)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.o.max_messages_per_batch)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._idle_wait_s, self._news = 0.0, False
        offset = self._plan(start, limit)
        if self._idle_wait_s > 0:
            heard = self._news_after_waiting(self._idle_wait_s)
            if heard == "rang":
                offset = self._plan_after_the_ring(start, limit)
            elif heard == "armed":
                offset = self._plan(start, limit)
        self._check_the_doorbell_hears()
        return offset

    def _plan_after_the_ring(self, start: dict, limit: ReadLimit) -> dict:
        """The plan once the bell rang: the message that rang it is in it, not in the next
        plan's, though the stream may count it a moment after the ring."""
        settle_by, pause = time.monotonic() + RING_SETTLE_S, RING_RECHECK_S
        while True:
            self._idle_wait_s = 0.0
            offset = self._plan(start, limit)
            left = settle_by - time.monotonic()
            # Still nothing, and still a plan that would wait (not a stop, nor a clock now due).
            if offset != start or self._idle_wait_s <= 0 or left <= 0:
                return offset
            time.sleep(min(pause, left))
            pause *= 2

    def _check_the_doorbell_hears(self) -> None:
        """A doorbell that stays armed while the stream grows is deaf (the account may not
        subscribe to the stream's subjects, or they are filled another way): polling again."""
        if self._bell is None or self._bell.subjects != self._subjects:
            self._deaf = 0
            return
        if not self._news:
            return  # quiet plans between news say nothing of the bell: a sparse stream counts too
        # News the bell was armed for well before (not a message stored just before the arming,
        # nor one the stream reported a moment before its ring arrived), on a connection that
        # has not been lost since (messages published while it was away rang nothing).
        deaf = (
            self._bell.armed
            and time.monotonic() - self._bell.armed_at > DEAF_AFTER_S
            and self._bell_nc.disconnects == self._bell.disconnects_at_arm
        )
        self._deaf = self._deaf + 1 if deaf else 0
        if self._deaf >= DEAF_AFTER_PLANS:
            log.warning(
                "stream %s: it stores messages that a subscription to its subjects (%s) does not "
                "hear (published another way, written by the server itself, or no permission to "
                "subscribe?); asking the stream for new messages every few ms instead",
                self.stream,
                ", ".join(self._bell.subjects),
            )
            with contextlib.suppress(Exception):
                self._loop.run(self._bell.disarm(), 5)
            self._bell, self._bell_given_up = None, True

    def _news_after_waiting(self, wait_s: float) -> Literal["rang", "armed", ""]:
        """Nothing new to copy: whether to look again now, after waiting up to `wait_s` for a
        message on the stream's subjects (without subjects, a mirror's or a sourcing stream's,
        Spark's own polling serves). "rang": a message was published on them; "armed": the bell
        was armed just now, so one stored before rang nothing; "": neither."""
        from replicator.nats.doorbell import Doorbell, DoorbellRefused

        # The stream's subjects, not the entry's filter: a plan's news is the stream's.
        if self._bell_given_up or not self._subjects:
            return ""
        try:
            loop, nc = self._conn()
            bell = self._bell
            if (
                bell is None
                or bell.subjects != self._subjects
                or self._bell_nc is not nc
                or bell.disconnects_at_arm != nc.disconnects
            ):
                # New, or the stream's subjects or the connection changed, or the connection was
                # lost since it was armed (a deaf bell the reconnect armed again would be
                # counted by nothing): its interest is stale.
                if bell is not None and self._bell_nc is nc:
                    loop.run(bell.disarm(), 5)
                self._bell, self._bell_nc = Doorbell(self._subjects), nc
            if loop.run(self._bell.arm(nc), 10):
                return "armed"  # armed just now: what was stored before rang nothing, so look
        except DoorbellRefused as e:
            log.warning(
                "stream %s: the server refused a subscription to its subjects (%s): %s; asking the "
                "stream for new messages every few ms instead (allow this user to subscribe to them)",
                self.stream,
                ", ".join(self._subjects),
                e,
            )
            self._bell, self._bell_given_up = None, True
            return ""
        except Exception as e:  # the connection is failing: the next plan's ask will say so
            log.debug("stream %s: doorbell not armed (%s); polling", self.stream, e)
            return ""
        return "rang" if self._bell.wait(wait_s) else ""

    def _plan(self, start: dict, limit: ReadLimit) -> dict:
        if self.o.stop_file and os.path.exists(self.o.stop_file):
            return start  # stopping: the batch that ran is the last
        lease: ReadLease | None = None
        if self.o.lease_file:
            lease = read_lease(self.o.lease_file)
            if lease is None:
                if not self._warmed:
                    # One batch that reads nothing while standing by: its first real batch
                    # otherwise pays for Spark's first-batch start-up (5-9 s under load) after
                    # the takeover. partitions() gives it one empty read task.
                    self._warmed = True
                    return {**start, "warm": int(start.get("warm", 0)) + 1}
                time.sleep(STANDBY_POLL_S)  # a standby: Spark asks again at once otherwise
                return start
        # A leader's first batch begins where the target's copy ends, wherever the checkpoint
        # stands (replicator.spark.read_lease); later ones where the last one ended.
        begin = int(start["seq"]) if lease is None else batch_begin(lease, start, self._configured_start())
        if isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            cap = 0  # all there is: ask where the stream ends
        else:
            cap = self.o.max_messages_per_batch
        if self._stream_end is None:
            # The first batch of this run: the stream's mean size, which caps a copy batch's
            # bytes, is not known yet (nor where the stream ends).
            self._stream_end = int(self._info().state.last_seq) + 1
        if cap and self._mean_bytes and not self.o.sampling:
            # A copy batch's payloads pass through the driver together (a sampled batch's rows
            # carry none: its copies are read back a chunk at a time).
            cap = min(cap, max(1, int(self.o.max_bytes_per_batch // self._mean_bytes)))
        known = self._stream_end
        if (
            cap
            and known is not None
            and known - begin > cap
            and time.monotonic() - self._info_at < INFO_AT_LEAST_S
        ):
            # Behind by more than a batch as last asked: the stream ends at least there, so
            # this batch needs no request (a round trip per batch across a long link).
            end = known
        else:
            end = self._info().state.last_seq + 1
            self._stream_end = end
            if not cap:
                cap = max(1, end - begin)
        # Below a first offset the query has not read past (a configured start beyond the
        # stream's end) the stream is waited for, not recreated.
        if end < begin and begin > self._configured_start() and not self._warned_reset:
            log.error(
                "stream %s ends at sequence %d but this query already read up to %d: the stream was "
                "recreated; remove the checkpoint under state_store to copy it again",
                self.stream,
                end - 1,
                begin - 1,
            )
            self._warned_reset = True
        last = end - 1
        end = self.ramp.end(begin, end, cap)
        if end <= begin and not self.o.sampling:
            self._idle_wait_s = NEWS_WAIT_S
            return start
        if not self.o.sampling:
            # "from": where this batch starts, kept in Spark's offset log with its end so the
            # driver can read a small batch itself (replicator.spark.small_batches); "term":
            # the lease it was planned under, the only one it may read under.
            offset: dict[str, Any] = {"seq": end, "from": begin}
            if lease is not None:
                offset["term"] = lease.term
            self._news = True
            return offset
        return self._with_clock(start, max(begin, end), caught_up=end > last)

    def _with_clock(self, start: dict, end: int, caught_up: bool) -> dict:
        """The offset with the batch's event-time clock (see the module docstring)."""
        from replicator.nats.jetstream import message_time_ms

        begin, previous = int(start["seq"]), int(start.get("clock", 0))
        assert self.o.sampling is not None
        if caught_up:
            # The time the stream was read at, by the clock that stamps its messages: one stored
            # after it, not in this batch, can never find the clock already past its own time
            # (with this host's clock it could, by the time between the read and now, or by
            # the clocks' skew: a sender whose gap was just under warn_duration was advised
            # timeout, then recover, found by the fault campaign).
            # It trails by CLOCK_TRAIL_MS: the leader of a clustered stream stamps a message when
            # it proposes it and counts it once its replicas agreed, so one in that round is not
            # counted yet though stamped before the read. Advisories keep their exact times; the
            # trail only delays them.
            now = (
                self._stream_time_ms - CLOCK_TRAIL_MS
                if self._stream_time_ms is not None
                else int(time.time() * 1000) - CLOCK_TRAIL_MS
            )
            if end == begin:
                wait_ms = self._ms_until_the_clock_moves(previous, now)
                if wait_ms > 0:
                    # Nothing new, and too soon to move the clock: wait for news until it is due.
                    due_s = wait_ms / 1000
                    self._idle_wait_s = min(NEWS_WAIT_S, due_s) if due_s >= MIN_NEWS_WAIT_S else 0.0
                    return start
            clock = now
        else:
            loop, nc = self._conn()
            clock = loop.run(message_time_ms(nc, self.stream, end - 1, bool(self._direct)), 30) or previous
        self._news = end > begin
        return {"seq": end, "clock": max(previous, clock)}

    def _ms_until_the_clock_moves(self, previous: int, now: int) -> int:
        """How long a caught-up sampled entry without messages keeps its clock at `previous`:
        until a sender's timeout or expiry is due, as the sink wrote after the batch that set
        it, or clock_max_idle_ms; without a file that matches, clock_interval_ms."""
        from replicator.spark.clock_due import read_clock_due

        o = self.o.sampling
        assert o is not None
        due = read_clock_due(o.clock_due_file, previous) if o.clock_due_file else None
        if due is None:
            return o.clock_interval_ms - (now - previous)
        wait = o.clock_max_idle_ms - (now - previous)
        return wait if due.due_ms is None else min(wait, due.due_ms - now)

    def reportLatestOffset(self) -> dict | None:
        # Spark asks right after latestOffset, for its progress report: what that one found.
        if self._stream_end is None:
            self._stream_end = self._info().state.last_seq + 1
        return {"seq": self._stream_end}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        rng = batch_read_range(
            self.o.lease_file, int(end.get("from", start["seq"])), int(end["seq"]), end.get("term")
        )
        if rng is None:
            if end.get("warm", 0) != start.get("warm", 0):
                return [
                    SequenceRange(int(start["seq"]), int(start["seq"]))
                ]  # the standby's warm-up: reads nothing
            return []  # a standby replaying a batch at start: it reads nothing
        parts: list[InputPartition] = list(
            split_range(*rng, self.o.parallelism, self.o.min_partition_messages)
        )
        if self.o.sampling:
            parts.append(ClockRows(int(end.get("clock", 0)), self.o.sampling.sampling_buckets))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Imported here, not at the top: Spark's planner processes import this module too, and
        # would each carry pyarrow (~40 MB) for nothing.
        from replicator.spark.rows import clock_batch, to_record_batch, to_sampling_batch

        if isinstance(partition, ClockRows):
            yield clock_batch(self.stream, partition.clock_ms, partition.buckets)
            return
        assert isinstance(partition, SequenceRange)
        for chunk in read_task_chunks(self.o, partition.start, partition.end, self._direct):
            if self.o.sampling is not None and self.extractor is not None:
                yield to_sampling_batch(self.stream, chunk, self.extractor, self.o.sampling.sampling_buckets)
            else:
                yield to_record_batch(self.stream, chunk)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._nc is not None and self._loop is not None:
            # Closing a dead connection must not fail the query stop.
            with contextlib.suppress(Exception):
                self._loop.run(self._nc.close(), 5)
            self._loop.stop()
        self._nc = None
        self._loop = None


async def choose_initial_offset(nc: Any, o: ReaderOptions) -> dict:
    """Where a new query starts: the configured start, but never before min_start_sequence."""
    from replicator.nats.jetstream import first_sequence_at, stream_info
    from replicator.nats.urls import parse_nats_url

    info = await stream_info(nc, o.stream)
    if info is None:
        where = parse_nats_url(o.url).redacted()
        raise RuntimeError(f"nats-jetstream: stream {o.stream} does not exist on {where}")
    if o.start_at_end:
        seq = int(info.state.last_seq) + 1
    elif o.start_time is not None:
        seq = await first_sequence_at(nc, info, o.start_time)
    else:
        seq = max(o.start_sequence, int(info.state.first_seq), 1)
    offset = {"seq": max(seq, o.min_start_sequence)}
    if o.sampling:
        offset["clock"] = 0
    return offset


def parse_initial_offset(text: str, where: str) -> dict:
    """A query's first offset as kept in its checkpoint (`where` names it in errors)."""
    try:
        offset = json.loads(text)
    except ValueError as e:
        raise RuntimeError(
            f"nats-jetstream: the first offset kept in {where} is unreadable ({e}); remove the "
            "checkpoint directory it is in to copy the stream again from the target's last message"
        ) from None
    if not isinstance(offset, dict) or not isinstance(offset.get("seq"), int):
        raise RuntimeError(f"nats-jetstream: the first offset kept in {where} is not an offset: {offset!r}")
    return offset


class NatsJetStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nats-jetstream"

    def schema(self) -> str:
        return SAMPLING_SCHEMA_DDL if ReaderOptions.from_spark(self.options).sampling else SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return NatsJetStreamReader(ReaderOptions.from_spark(self.options))


def read_range_chunks(
    o: ReaderOptions, start: int, end: int, direct: bool | None = None
) -> Iterator[list[Any]]:
    """Messages with start <= seq < end, one chunk at a time, on a connection of its own (the
    catch-up's, the gap fill's). `direct`: whether the stream allows direct gets (None: ask it)."""
    import asyncio

    from replicator.source_reader import SourceReader

    loop = asyncio.new_event_loop()
    reader = SourceReader(o, direct=direct)
    chunks = reader.chunks(start, end)
    try:
        while True:
            try:
                chunk = loop.run_until_complete(anext(chunks))
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        # Also when the caller stops early: the reader cleans up (its consumer) first.
        with contextlib.suppress(Exception):
            loop.run_until_complete(chunks.aclose())
        with contextlib.suppress(Exception):
            loop.run_until_complete(reader.close())
        loop.close()


# The source readers of this worker's read tasks, one a stream, each on the connection the worker
# keeps (replicator.spark.worker_connections) and knowing whether its stream allows direct gets
# (one request a task otherwise). Forgotten with the connection when a read fails.
_task_readers: dict[tuple[str, str], Any] = {}


def _task_reader(o: ReaderOptions, direct: bool | None) -> tuple[Any, Any]:
    """(loop, SourceReader) for a read task of this worker."""
    from replicator.source_reader import SourceReader
    from replicator.spark.worker_connections import worker_connection

    loop, nc = worker_connection(o.url, o.tls, f"sr-reader-{o.stream}")
    key = (o.url, o.stream)
    kept = _task_readers.get(key)
    if kept is None or kept.o != o or not kept.uses(nc):
        known = direct if direct is not None else (kept.direct if kept is not None else None)
        kept = _task_readers[key] = SourceReader(o, nc, known)
    return loop, kept


def _drop_task_reader(o: ReaderOptions) -> None:
    from replicator.spark.worker_connections import drop_worker_connection

    _task_readers.pop((o.url, o.stream), None)
    drop_worker_connection(o.url, o.tls)


def read_task_chunks(o: ReaderOptions, start: int, end: int, direct: bool | None) -> Iterator[list[Any]]:
    """What `read_range_chunks` reads, on the worker's kept connection (see _task_reader). A
    read that fails or is abandoned drops the connection: the next task starts afresh."""
    from replicator.nats.readers import REQUEST_TIMEOUT_S

    loop, reader = _task_reader(o, direct)
    finished = False
    chunks = reader.chunks(start, end)
    try:

        async def next_chunk() -> Any:
            return await anext(chunks)

        while True:
            try:
                # The reader's own requests time out; this bound is for a loop that hangs.
                chunk = loop.run(next_chunk(), 4 * REQUEST_TIMEOUT_S)
            except StopAsyncIteration:
                finished = True
                return
            yield chunk
    finally:
        with contextlib.suppress(Exception):
            loop.run(chunks.aclose(), 10)
        if not finished:
            _drop_task_reader(o)
