"""The ordered sink: publishes each micro-batch to the target stream in source order.

Used through `foreachBatch`: the batch is collected to the driver as Arrow (partitions come
back in sequence order) and published on one connection with pipelined JetStream acks. The
batch returns only when every message is acknowledged; any failure raises, so the micro-batch
is not committed and is replayed. Replays are harmless: each copy carries a deterministic
`Nats-Msg-Id` (the target's duplicate window drops it) and nothing at or below the highest
sequence already in the target is published again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.aio import LoopThread
from replicator.config import TLSConfig
from replicator.headers import (
    EXPECTED_STREAM_HEADER,
    MSG_ID_HEADER,
    SOURCE_HEADER,
    format_source_header,
    is_copied,
    message_id,
)
from replicator.logs import stream_logger
from replicator.metrics import MetricLabels, metrics
from replicator.nats.client import ReplicatorClient
from replicator.nats.connect import open_connection
from replicator.nats.publisher import PipelinedPublisher, PublishError, PublishOutcome
from replicator.nats.wire import encode_header_lines
from replicator.spark.inflight import InflightRecord
from replicator.subjects import rewrite_subject

log = logging.getLogger(__name__)


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
    tls: TLSConfig | None = None
    max_pending: int = 4000
    ack_timeout: float = 30.0


def _ascending(seqs: Any) -> bool:
    if len(seqs) < 2:
        return True
    return bool(pc.all(pc.greater(seqs.slice(1), seqs.slice(0, len(seqs) - 1))).as_py())


class OrderedSink:
    """Callable for `foreachBatch(sink)`; keeps its target connection across batches."""

    def __init__(
        self, settings: SinkSettings, loop: LoopThread, floor: int = 0, inflight: InflightRecord | None = None
    ) -> None:
        self.settings = settings
        self.loop = loop
        self.log = stream_logger(__name__, f"{settings.source_stream}/{settings.config_name}")
        # Where the batch being published is recorded until acknowledged (None: publish in the
        # foreachBatch call itself; the sampling sink does, its decisions are not re-derivable).
        self.inflight = inflight
        self._pending: Future[None] | None = None
        # Highest source sequence known to be in the target: never published again.
        self.floor = floor
        self._nc: ReplicatorClient | None = None
        self._publisher: PipelinedPublisher | None = None
        self.labels = MetricLabels(settings.source_stream, settings.replicator, settings.config_name)
        self.totals = BatchResult()
        self.batches = 0  # handled (published or skipped) since this process started

    async def _conn(self) -> ReplicatorClient:
        if self._nc is None or self._nc.is_closed:
            self._nc = await open_connection(
                self.settings.target_url, self.settings.tls, name=f"sr-target-{self.settings.config_name}"
            )
        return self._nc

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        """One micro-batch. With an in-flight record this returns once the batch is recorded
        and its publishing started, so Spark reads the next batch while this one is published;
        the previous batch must have been fully acknowledged first (or this batch fails)."""
        started = time.monotonic()
        table: pa.Table = batch_df.toArrow()
        collected = time.monotonic()
        if self.inflight is None:
            result = self.publish_table(table)
            result.seconds = time.monotonic() - started
            self.account(result)
        else:
            self.wait_published()
            todo, result = self.select(table)
            if todo.num_rows:
                self.inflight.write(int(todo.column("seq")[0].as_py()), result.last_seq)
                self._pending = self.loop.submit(self._publish_and_settle(todo, result, started))
            else:
                self.floor = max(self.floor, result.last_seq)
                result.seconds = time.monotonic() - started
                self.account(result)
        self.log.debug(
            "batch %d: %d rows, collect %.3fs, then %.3fs",
            batch_id,
            result.received,
            collected - started,
            time.monotonic() - collected,
        )

    async def _publish_and_settle(self, todo: pa.Table, r: BatchResult, started: float) -> None:
        outcome = await self._publish(todo)
        r.duplicates = outcome.duplicates
        # Accounted here, on the loop thread, before the future completes: whoever waits on it
        # sees the floor and the totals already moved.
        self.floor = max(self.floor, r.last_seq)
        r.seconds = time.monotonic() - started
        self.account(r)
        if self.inflight is not None:
            self.inflight.clear()

    def wait_published(self, timeout: float | None = None) -> None:
        """Wait until the batch being published is acknowledged; raise its error if it failed."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result(timeout)

    def publish_failed(self) -> BaseException | None:
        """The error of a background publish that failed (None while running or fine)."""
        p = self._pending
        if p is None or not p.done() or p.cancelled():
            return None
        return p.exception()

    def publish_table(
        self,
        table: pa.Table,
        now: float | None = None,
        copy_mask: Any = None,
        sizes: Any = None,
    ) -> BatchResult:
        """Publish, and wait for, the rows `select` keeps."""
        todo, r = self.select(table, now, copy_mask, sizes)
        if todo.num_rows:
            outcome = self.loop.run(self._publish(todo), timeout=None)
            r.duplicates = outcome.duplicates
        # Every row of the batch is now handled (copied, or deliberately skipped).
        self.floor = max(self.floor, r.last_seq)
        return r

    def republish(self, table: pa.Table) -> BatchResult:
        """Publish rows read again from the source (what an earlier run left in flight), and
        count them like any batch."""
        result = self.publish_table(table)
        self.account(result)
        return result

    def select(
        self,
        table: pa.Table,
        now: float | None = None,
        copy_mask: Any = None,
        sizes: Any = None,
    ) -> tuple[pa.Table, BatchResult]:
        """The rows of `table` to publish, in seq order: above the floor, fresh enough and, when
        sampling, selected by `copy_mask`; `sizes` gives payload sizes of rows whose data was
        dropped upstream (skipped by sampling)."""
        r = BatchResult(received=table.num_rows)
        if table.num_rows == 0:
            return table, r
        sizes = pc.binary_length(table.column("data")) if sizes is None else sizes
        r.received_bytes = int(pc.sum(sizes).as_py() or 0)
        seqs = table.column("seq")
        r.last_seq = int(pc.max(seqs).as_py())
        keep = pc.greater(seqs, self.floor)
        if copy_mask is not None:
            keep = pc.and_(keep, copy_mask)
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
            raise
        except Exception as e:
            raise PublishError(
                f"publishing to target stream {self.settings.target_stream} failed: {e!r}; the batch will be retried"
            ) from e

    async def _publish_all(self, table: pa.Table) -> PublishOutcome:
        nc = await self._conn()
        if self._publisher is None or self._publisher.nc is not nc:
            self._publisher = PipelinedPublisher(nc, self.settings.target_stream, self.settings.max_pending)
        s = self.settings
        source, replicator, config_name, identity = (
            s.source_stream,
            s.replicator,
            s.config_name,
            s.stream_identity,
        )
        prefix, remove = s.subject_prefix, s.subject_remove
        subjects = table.column("subject").to_pylist()
        seqs = table.column("seq").to_pylist()
        ts_ms = pc.divide(pc.cast(table.column("timestamp"), pa.int64()), 1000).to_pylist()
        headers = table.column("headers").to_pylist()
        datas = table.column("data").to_pylist()

        # The copy's header lines: the source message's own (see headers.is_copied), then ours.
        line = b"%s%s: %s\r\n%s: %s\r\n" + encode_header_lines([(EXPECTED_STREAM_HEADER, s.target_stream)])
        src_name, id_name = SOURCE_HEADER.encode(), MSG_ID_HEADER.encode()

        def messages() -> Iterator[tuple[str, bytes, bytes]]:
            for subject, seq, ts, hdr, data in zip(subjects, seqs, ts_ms, headers, datas, strict=True):
                own = encode_header_lines((k, v) for k, v in hdr if is_copied(k)) if hdr else b""
                lines = line % (
                    own,
                    src_name,
                    format_source_header(source, seq, replicator, config_name, ts).encode(),
                    id_name,
                    message_id(identity, seq).encode(),
                )
                yield rewrite_subject(subject, prefix, remove), data, lines

        outcome = await self._publisher.publish(messages(), s.ack_timeout + table.num_rows / 1000)
        if outcome.failures:
            index, reason = outcome.failures[0]
            hint = (
                ": check target_subject_prefix/target_subject_remove against the target's subjects"
                if "stream" in reason
                else ""
            )
            raise PublishError(
                f"{len(outcome.failures)} of {outcome.published} messages were not stored in target stream "
                f"{s.target_stream} (source sequence {seqs[index]}: {reason}){hint}; the batch will be retried"
            )
        return outcome

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
        t = self.totals
        t.received += r.received
        t.received_bytes += r.received_bytes
        t.copied += r.copied
        t.copied_bytes += r.copied_bytes
        t.too_old += r.too_old
        t.duplicates += r.duplicates
        t.last_seq = max(t.last_seq, r.last_seq)
        self.batches += 1

    def close(self, grace: float = 10.0) -> None:
        try:
            self.wait_published(grace)
        except Exception as e:  # its in-flight record stays: the next start publishes it
            self.log.warning("the last batch was not fully published (%s); it will be on the next start", e)
        if self._nc is not None and not self._nc.is_closed:
            try:
                self.loop.run(self._nc.close(), 5)
            except Exception as e:  # closing must not mask the reason we stop
                log.debug("closing target connection: %s", e)
        self._nc = None
