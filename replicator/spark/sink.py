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
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from nats.aio.client import Client

from replicator.aio import LoopThread
from replicator.config import TLSConfig
from replicator.headers import MSG_ID_HEADER, SOURCE_HEADER, format_source_header, message_id
from replicator.metrics import MetricLabels, metrics
from replicator.nats.connect import open_connection
from replicator.nats.publisher import PipelinedPublisher, PublishError, PublishOutcome
from replicator.subjects import rewrite_subject

log = logging.getLogger(__name__)


@dataclass
class BatchResult:
    received: int = 0
    received_bytes: int = 0
    copied: int = 0
    copied_bytes: int = 0
    too_old: int = 0
    already_copied: int = 0
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


class OrderedSink:
    """Callable for `foreachBatch(sink)`; keeps its target connection across batches."""

    def __init__(self, settings: SinkSettings, loop: LoopThread, floor: int = 0) -> None:
        self.s = settings
        self.loop = loop
        # Highest source sequence known to be in the target: never published again.
        self.floor = floor
        self._nc: Client | None = None
        self._publisher: PipelinedPublisher | None = None
        self.labels = MetricLabels(settings.source_stream, settings.replicator, settings.config_name)
        self.totals = BatchResult()
        self.last_batch: BatchResult | None = None

    async def _conn(self) -> Client:
        if self._nc is None or self._nc.is_closed:
            self._nc = await open_connection(
                self.s.target_url, self.s.tls, name=f"sr-target-{self.s.config_name}"
            )
        return self._nc

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        table: pa.Table = batch_df.toArrow()
        collected = time.monotonic()
        result = self.publish_table(table)
        result.seconds = time.monotonic() - started
        self._account(result)
        log.debug(
            "batch %d: %d rows, collect %.3fs, publish %.3fs",
            batch_id,
            result.received,
            collected - started,
            result.seconds - (collected - started),
        )

    def publish_table(
        self,
        table: pa.Table,
        now: float | None = None,
        copy_mask: Any = None,
        sizes: Any = None,
    ) -> BatchResult:
        """Publish the rows of `table` (in seq order) that are above the floor, fresh enough and,
        when sampling, selected by `copy_mask`; `sizes` gives payload sizes of rows whose data
        was dropped upstream (skipped by sampling)."""
        r = BatchResult(received=table.num_rows)
        if table.num_rows == 0:
            return r
        sizes = pc.binary_length(table.column("data")) if sizes is None else sizes
        r.received_bytes = int(pc.sum(sizes).as_py() or 0)
        seqs = table.column("seq")
        r.last_seq = int(pc.max(seqs).as_py())
        keep = pc.greater(seqs, self.floor)
        r.already_copied = table.num_rows - int(pc.sum(keep).as_py() or 0)
        if copy_mask is not None:
            keep = pc.and_(keep, copy_mask)
        if self.s.max_age_seconds is not None:
            cutoff_us = int(((now or time.time()) - self.s.max_age_seconds) * 1e6)
            fresh = pc.greater_equal(pc.cast(table.column("timestamp"), pa.int64()), cutoff_us)
            r.too_old = int(pc.sum(pc.and_(keep, pc.invert(fresh))).as_py() or 0)
            keep = pc.and_(keep, fresh)
        todo = table.filter(keep)
        if todo.num_rows:
            # Source order is the contract; the batch is already ordered, but sorting costs
            # little and protects against any upstream operator that reorders.
            todo = todo.sort_by("seq")
            outcome = self.loop.run(self._publish(todo), timeout=None)
            r.copied = todo.num_rows
            r.copied_bytes = int(pc.sum(pc.binary_length(todo.column("data"))).as_py() or 0)
            r.duplicates = outcome.duplicates
        # Every row of the batch is now handled (copied, or deliberately skipped).
        self.floor = max(self.floor, r.last_seq)
        return r

    async def _publish(self, table: pa.Table) -> PublishOutcome:
        """Publish in order and wait for every ack, under one deadline for the whole batch."""
        try:
            return await self._publish_all(table)
        except PublishError:
            raise
        except Exception as e:
            raise PublishError(
                f"publishing to target stream {self.s.target_stream} failed: {e!r}; the batch will be retried"
            ) from e

    async def _publish_all(self, table: pa.Table) -> PublishOutcome:
        nc = await self._conn()
        if self._publisher is None or self._publisher.nc is not nc:
            self._publisher = PipelinedPublisher(nc, self.s.target_stream, self.s.max_pending)
        s = self.s
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

        def messages() -> Iterator[tuple[str, bytes, dict[str, str]]]:
            for subject, seq, ts, hdr, data in zip(subjects, seqs, ts_ms, headers, datas, strict=True):
                h = dict(hdr) if hdr else {}
                h[SOURCE_HEADER] = format_source_header(source, seq, replicator, config_name, ts)
                h[MSG_ID_HEADER] = message_id(identity, seq)
                yield rewrite_subject(subject, prefix, remove), data, h

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

    def _account(self, r: BatchResult) -> None:
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
        t.already_copied += r.already_copied
        t.duplicates += r.duplicates
        t.last_seq = max(t.last_seq, r.last_seq)
        self.last_batch = r

    def close(self) -> None:
        if self._nc is not None and not self._nc.is_closed:
            try:
                self.loop.run(self._nc.close(), 5)
            except Exception as e:  # closing must not mask the reason we stop
                log.debug("closing target connection: %s", e)
        self._nc = None
