"""`nats-jetstream`: a PySpark streaming data source that reads a JetStream stream.

    spark.dataSource.register(NatsJetStreamDataSource)
    df = (spark.readStream.format("nats-jetstream")
          .option("url", "nats://127.0.0.1:4222").option("stream", "ORDERS").load())

Offsets are stream sequences (`{"seq": next sequence to read}`) kept in Spark's checkpoint, so a
restarted query re-reads exactly the ranges it had not committed. Each micro-batch covers
`[start, end)`; the range is split into contiguous sub-ranges read in parallel by Spark tasks,
and the partitions come back in sequence order, so `collect()`/`toArrow()` of a batch is in
source order.

Options: url (required), stream (required), filter_subject, start_sequence, start_time
(RFC3339), start_at_end, max_messages_per_batch (admission control; default 10000),
first_batch_messages (batches start this small and double with every full batch; default 2000),
parallelism (ranges per batch; default 2), min_partition_messages (default 1000, so the first
2,000-row batch already starts both read workers), tls_ca/tls_cert/tls_key.

Sampling mode (`sampling=true`, with inspect_field / inspect_header / inspect_subject_token,
inspect_force_field, sampling_buckets): rows also carry `sender`, `force`, `bucket` (a hash of
the sender), `size` and `ts_ms`, and headers come as a JSON string. Each offset then also holds
the batch's event-time clock: the time of its last message, or the wall clock once the reader
has caught up with the stream (then a batch runs every `clock_interval_ms` even without new
messages). Each batch carries one clock row (seq < 0) per bucket, so every bucket sees time
move. The clock is in the checkpointed offset, so a replayed batch sees the same clock.
"""

from __future__ import annotations

import contextlib
import logging
import math
import zlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    import pyarrow as pa

    from replicator.config import TLSConfig

log = logging.getLogger(__name__)

SCHEMA_DDL = (
    "stream STRING, seq BIGINT, subject STRING, timestamp TIMESTAMP, headers MAP<STRING, STRING>, data BINARY"
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


def bucket_of(key: str, buckets: int) -> int:
    return zlib.crc32(key.encode()) % buckets


def split_range(start: int, end: int, parallelism: int, min_size: int) -> list[SequenceRange]:
    """Contiguous sub-ranges in order; small ranges stay whole (a task costs more than it saves)."""
    n = end - start
    if n <= 0:
        return []
    parts = max(1, min(parallelism, n // max(min_size, 1)))
    size = math.ceil(n / parts)
    return [SequenceRange(s, min(s + size, end)) for s in range(start, end, size)]


def _bool(v: str | None) -> bool:
    return str(v).lower() in ("1", "true", "yes")


def _tls(options: dict[str, str]) -> TLSConfig | None:
    if not any(options.get(k) for k in ("tls_ca", "tls_cert", "tls_key")):
        return None
    from replicator.config import TLSConfig

    return TLSConfig(
        ca=options.get("tls_ca", ""), cert=options.get("tls_cert", ""), key=options.get("tls_key", "")
    )


class NatsJetStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        try:
            self.url = options["url"]
            self.stream = options["stream"]
        except KeyError as e:
            raise ValueError(f"nats-jetstream: option {e.args[0]!r} is required") from None
        self.filter_subject = options.get("filter_subject", "")
        self.start_sequence = int(options.get("start_sequence", "0") or 0)
        self.start_time = options.get("start_time") or None
        self.start_at_end = _bool(options.get("start_at_end"))
        # Never start below this (the replicator passes 1 + the last sequence already copied).
        self.min_start_sequence = int(options.get("min_start_sequence", "0") or 0)
        self.max_per_batch = int(options.get("max_messages_per_batch", "10000"))
        if self.max_per_batch < 1:
            raise ValueError("nats-jetstream: max_messages_per_batch must be at least 1")
        self.ramp = BatchRamp(int(options.get("first_batch_messages", "2000")), self.max_per_batch)
        self.parallelism = max(1, int(options.get("parallelism", "2")))
        self.min_partition = max(1, int(options.get("min_partition_messages", "1000")))
        self.chunk = max(1, int(options.get("read_chunk", "5000")))
        self.tls = _tls(options)
        self.sampling = _bool(options.get("sampling"))
        self.buckets = max(1, int(options.get("sampling_buckets", "32")))
        self.clock_interval_ms = int(options.get("clock_interval_ms", "1000"))
        self.extractor: Any = None
        if self.sampling:
            from replicator.sampling.extract import SenderExtractor

            self.extractor = SenderExtractor.from_options(options)
            if not self.extractor.label:
                raise ValueError(
                    "nats-jetstream: sampling needs inspect_field, inspect_header or inspect_subject_token"
                )
        self._direct: bool | None = None
        self._warned_reset = False
        self._loop: Any = None
        self._nc: Any = None

    # The planner side (initialOffset/latestOffset/partitions) keeps one connection on a loop
    # thread; tasks get a pickled copy without it (a live connection cannot be pickled).
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_loop"] = None
        state["_nc"] = None
        return state

    def _conn(self) -> tuple[Any, Any]:
        if self._nc is None or self._nc.is_closed:
            from replicator.aio import LoopThread
            from replicator.nats.connect import open_connection

            if self._loop is None:
                self._loop = LoopThread("nats-jetstream-planner")
            self._nc = self._loop.run(
                open_connection(self.url, self.tls, name=f"sr-planner-{self.stream}"), 60
            )
        return self._loop, self._nc

    def _info(self) -> Any:
        from replicator.nats.jetstream import stream_info

        loop, nc = self._conn()
        info = loop.run(stream_info(nc, self.stream), 30)
        if info is None:
            raise RuntimeError(f"nats-jetstream: stream {self.stream} does not exist on {self.url}")
        self._direct = bool(info.config.allow_direct)
        return info

    def initialOffset(self) -> dict:
        start: dict[str, int] = {"seq": max(self._configured_start(), self.min_start_sequence)}
        if self.sampling:
            start["clock"] = 0
        return start

    def _configured_start(self) -> int:
        from replicator.nats.jetstream import sequence_at_time

        info = self._info()
        if self.start_at_end:
            return int(info.state.last_seq) + 1
        if self.start_time:
            loop, nc = self._conn()
            when = datetime.fromisoformat(self.start_time.replace("Z", "+00:00"))
            seq = loop.run(sequence_at_time(nc, self.stream, when, bool(self._direct)), 30)
            return seq if seq is not None else int(info.state.last_seq) + 1
        return max(self.start_sequence, int(info.state.first_seq), 1)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_batch)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        info = self._info()
        end = info.state.last_seq + 1
        begin = int(start["seq"])
        if end < begin and not self._warned_reset:
            log.error(
                "stream %s ends at sequence %d but this query already read up to %d: the stream was "
                "recreated; remove the checkpoint under state_store to copy it again",
                self.stream,
                end - 1,
                begin - 1,
            )
            self._warned_reset = True
        last = end - 1
        if isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            cap = max(1, end - begin)
        else:
            cap = self.max_per_batch
        end = self.ramp.end(begin, end, cap)
        if end <= begin and not self.sampling:
            return start
        if not self.sampling:
            return {"seq": end}
        return self._with_clock(start, max(begin, end), caught_up=end > last)

    def _with_clock(self, start: dict, end: int, caught_up: bool) -> dict:
        """The offset with the batch's event-time clock (see the module docstring)."""
        import time

        from replicator.nats.jetstream import message_time_ms

        begin, previous = int(start["seq"]), int(start.get("clock", 0))
        if caught_up:
            now = int(time.time() * 1000)
            if end == begin and now - previous < self.clock_interval_ms:
                return start  # nothing new, and too soon to move the clock
            clock = now
        else:
            loop, nc = self._conn()
            clock = loop.run(message_time_ms(nc, self.stream, end - 1, bool(self._direct)), 30) or previous
        return {"seq": end, "clock": max(previous, clock)}

    def reportLatestOffset(self) -> dict | None:
        return {"seq": self._info().state.last_seq + 1}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        parts: list[InputPartition] = list(
            split_range(int(start["seq"]), int(end["seq"]), self.parallelism, self.min_partition)
        )
        if self.sampling:
            parts.append(ClockRows(int(end.get("clock", 0)), self.buckets))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Imported here, not at the top: Spark's planner processes import this module too, and
        # would each carry pyarrow (~40 MB) for nothing.
        from replicator.spark.rows import clock_batch, to_record_batch, to_sampling_batch

        if isinstance(partition, ClockRows):
            yield clock_batch(self.stream, partition.clock_ms, partition.buckets)
            return
        assert isinstance(partition, SequenceRange)
        import asyncio

        from replicator.nats.connect import open_connection
        from replicator.nats.jetstream import read_range

        async def fetch() -> list[list[Any]]:
            nc = await open_connection(self.url, self.tls, name=f"sr-reader-{self.stream}")
            try:
                return await read_range(
                    nc,
                    self.stream,
                    self.filter_subject,
                    partition.start,
                    partition.end,
                    self._direct,
                    self.chunk,
                )
            finally:
                await nc.close()

        for chunk in asyncio.run(fetch()):
            if self.sampling:
                yield to_sampling_batch(self.stream, chunk, self.extractor, self.buckets)
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


class NatsJetStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nats-jetstream"

    def schema(self) -> str:
        return SAMPLING_SCHEMA_DDL if _bool(self.options.get("sampling")) else SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return NatsJetStreamReader(dict(self.options))
