"""Copy batches read in the driver, on its own source connection, instead of by a Spark job.

A live stream arrives a few messages at a time, and each of those batches paid for a Spark job
(schedule a task, hand it to a Python worker, move its rows through the JVM and back as Arrow):
30-40 ms of a ~70 ms one-message batch (`make bench`, latency). The ordered sink collects every
batch into the driver anyway, so a batch of at most `max_messages` is read there directly: up to
1,000 messages on a cluster, and every copy batch while Spark runs embedded, where moving a
backlog's rows through the JVM cost more CPU than reading them (config `driver_reads`). Spark
still decides each batch's range and keeps it in its offset log before the sink runs, so a
replayed batch reads the same range either way; larger batches are read by Spark's tasks, in
parallel.

The range comes from the batch's own entry in the checkpoint's offset log: the source's end
offset for a copy carries the sequence its batch starts at ("from", see NatsJetStreamReader),
so one small file names the whole range. A batch whose entry has no "from" (a checkpoint
written before it existed) is read by Spark.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import pyarrow as pa

from replicator.aio import LoopThread
from replicator.nats.readers import ReadInterrupted
from replicator.options import ReaderOptions
from replicator.source_reader import SourceReader
from replicator.spark.checkpoint import CheckpointFiles
from replicator.spark.datasource import split_range
from replicator.spark.internals import offset_log_source_offset
from replicator.spark.read_lease import batch_read_range
from replicator.spark.rows import ARROW_SCHEMA, to_record_batch

log = logging.getLogger(__name__)

# Batches whose row counts are kept for the progress listener, which hears of a batch after it.
KEEP_ROWS_OF = 16


def batch_offsets(checkpoint: CheckpointFiles, batch_id: int) -> tuple[int, int, str | None] | None:
    """(first, end) sequences of a copy batch from the checkpoint's offset log, and the read
    lease's term it was planned under (replicator.spark.read_lease), or None when its entry is
    missing or does not name its start."""
    try:
        text = checkpoint.read_text(f"offsets/{batch_id}")
    except Exception:  # unreadable just now (a remote store's hiccup): Spark reads the batch
        return None
    offset = offset_log_source_offset(text)
    if offset is None:
        return None
    first, end = offset.get("from"), offset.get("seq")
    term = offset.get("term")
    if not isinstance(first, int) or not isinstance(end, int) or not isinstance(term, str | None):
        return None
    return first, end, term


class SmallBatchReader:
    """Called by the ordered sink with a batch id: that batch's rows as an Arrow table, or None
    when Spark is to read it (too large, or its range is not in the offset log)."""

    def __init__(
        self,
        options: ReaderOptions,
        checkpoint: CheckpointFiles,
        loop: LoopThread,
        source: SourceReader,
        max_messages: int,
    ) -> None:
        self.o = options
        self.checkpoint = checkpoint
        self.loop = loop
        self.source = source  # on the driver's source connection
        self.max_messages = max_messages
        self.batches_read = 0  # read here since the start (the rest went through Spark)
        # Rows of the last batches read here (Spark counts none for them in its progress).
        self.rows: OrderedDict[int, int] = OrderedDict()

    def __call__(self, batch_id: int, above: int = 0) -> pa.Table | None:
        """`above`: only its rows of source sequences above this (the target holds the rest)."""
        offsets = batch_offsets(self.checkpoint, batch_id)
        if offsets is None:
            return None
        rng = batch_read_range(self.o.lease_file, *offsets)
        if rng is not None:
            rng = (max(rng[0], above + 1), rng[1])
        if rng is None:
            # Not under the lease it was planned under: nothing (as its Spark tasks would read).
            table = ARROW_SCHEMA.empty_table()
        elif rng[1] - rng[0] > self.max_messages:
            return None
        elif not self.source.connected:
            return None  # reconnecting: Spark's task reads it on a connection of its own
        else:
            first, end = rng
            try:
                # No bound on the whole read: each request gives up once its replies stop
                # coming (readers.await_replies), so a slow link that delivers is waited for.
                batches = self.loop.run(self._read(first, end)) if end > first else []
            except ReadInterrupted as e:
                log.info("%s; Spark reads batch %d instead", e, batch_id)
                return None
            table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
        self.batches_read += 1
        self.rows[batch_id] = table.num_rows
        while len(self.rows) > KEEP_ROWS_OF:
            self.rows.popitem(last=False)
        return table

    async def _read(self, first: int, end: int) -> list[pa.RecordBatch]:
        """The range's rows in order, its sub-ranges read side by side as Spark's tasks would
        read them: across a long link each chunk waits a round trip, and this overlaps them."""
        parts = split_range(first, end, self.o.parallelism, self.o.min_partition_messages)
        chunks = await self.source.parts_side_by_side([(p.start, p.end) for p in parts])
        return [to_record_batch(self.o.stream, chunk) for chunk in chunks]
