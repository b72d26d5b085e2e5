"""`order: subject`: a copy batch published by the executors, one lane per task.

The batch is hashed by subject into `lanes` partitions (Spark's shuffle) and each is sorted by
source sequence; every task publishes its lane in that order on a connection of its own and
waits for each ack before it ends. Messages of one subject keep their order, as a partitioned
Choria deployment gives; across subjects they do not. The payloads no longer pass through the
driver, whose one process is the ceiling of `order: stream`.

A batch cut short (a failed task, a crash) is published again from the checkpoint. Copies
carry a deterministic Nats-Msg-Id, so the target's duplicate window drops those it stored.
Lanes publish side by side, so copies are not chained with Nats-Expected-Last-Sequence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.headers import message_id
from replicator.nats.publisher import PublishError
from replicator.spark.sink import BatchResult, SinkSettings, copy_header_lines
from replicator.subjects import rewrite_subject

# What each lane task returns to the driver, for the metrics.
LANE_RESULT = pa.schema(
    [("rows", pa.int64()), ("bytes", pa.int64()), ("duplicates", pa.int64()), ("last_seq", pa.int64())]
)


def lane_messages(table: pa.Table, s: SinkSettings) -> Iterator[tuple[str, bytes, bytes]]:
    """(subject, payload, header lines) of each copy, in the table's order."""
    ts_ms = pc.divide(pc.cast(table.column("timestamp"), pa.int64()), 1000).to_pylist()
    columns = zip(
        table.column("subject").to_pylist(),
        table.column("seq").to_pylist(),
        table.column("headers").to_pylist(),
        table.column("data").to_pylist(),
        ts_ms,
        strict=True,
    )
    for subject, seq, hdr, data, ts in columns:
        lines = copy_header_lines(s, seq, hdr, ts, message_id(s.stream_identity, seq))
        yield rewrite_subject(subject, s.subject_prefix, s.subject_remove), data, lines


# One publisher per target stream in each executor Python process, on the connection the worker
# keeps across tasks and batches (replicator.spark.worker_connections).
_lock = threading.Lock()
_publishers: dict[tuple[str, str], Any] = {}


def _publisher(s: SinkSettings) -> tuple[Any, Any]:
    from replicator.nats.publisher import PipelinedPublisher
    from replicator.spark.worker_connections import worker_connection

    loop, nc = worker_connection(s.target_url, s.tls, f"sr-lane-{s.config_name}")
    key = (s.target_url, s.target_stream)
    with _lock:
        publisher = _publishers.get(key)
        if publisher is None or publisher.nc is not nc:
            publisher = _publishers[key] = PipelinedPublisher(nc, s.target_stream, s.max_pending)
        return loop, publisher


def publish_lane(s: SinkSettings) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function `mapInArrow` runs on each lane: publish it in order, return its counts."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = size = duplicates = last_seq = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            loop, publisher = _publisher(s)
            outcome = loop.run(
                publisher.publish(lane_messages(table, s), s.ack_timeout + table.num_rows / 1000), None
            )
            first = outcome.first_failure()
            if first is not None:
                seq = table.column("seq")[first.index].as_py()
                raise PublishError(
                    f"target stream {s.target_stream} refused source sequence {seq}: {first.reason}; "
                    "the batch will be published again"
                )
            rows += table.num_rows
            size += int(pc.sum(pc.binary_length(table.column("data"))).as_py() or 0)
            duplicates += outcome.duplicates
            last_seq = max(last_seq, int(pc.max(table.column("seq")).as_py()))
        yield pa.RecordBatch.from_pydict(
            {"rows": [rows], "bytes": [size], "duplicates": [duplicates], "last_seq": [last_seq]},
            schema=LANE_RESULT,
        )

    return run


class LaneSink:
    """Callable for `foreachBatch`: the batch's lanes published by Spark's tasks."""

    def __init__(self, settings: SinkSettings, lanes: int, account: Callable[[BatchResult], None]) -> None:
        self.settings = settings
        self.lanes = lanes
        self.account = account  # the stream's metrics and totals (OrderedSink.account)

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        started = time.monotonic()
        lanes = batch_df.repartition(self.lanes, "subject").sortWithinPartitions("seq")
        done = lanes.mapInArrow(publish_lane(self.settings), from_arrow_schema(LANE_RESULT)).agg(
            *(F.sum(c).alias(c) for c in ("rows", "bytes", "duplicates")), F.max("last_seq").alias("last_seq")
        )
        row = done.collect()[0]
        rows, size, duplicates, last_seq = (
            int(row[c] or 0) for c in ("rows", "bytes", "duplicates", "last_seq")
        )
        self.account(
            BatchResult(
                received=rows,
                received_bytes=size,
                copied=rows,
                copied_bytes=size,
                duplicates=duplicates,
                last_seq=last_seq,
                seconds=time.monotonic() - started,
            )
        )
