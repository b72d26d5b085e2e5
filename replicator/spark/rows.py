"""Arrow record batches of the `nats-jetstream` source's rows (apart from the source itself, so
that only the processes that read messages import pyarrow).

Headers keep every value of a repeated name, in order: a map column of (name, value) entries
(Arrow and Spark keep a map's entries as given). A sampled row carries neither headers nor
payload (see to_sampling_batch).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from replicator.nats.readers import RawMessage
from replicator.sampling.extract import SenderExtractor, bucket_of

SAMPLING_ARROW_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("seq", pa.int64()),
        ("subject", pa.string()),
        ("ts_ms", pa.int64()),
        ("headers", pa.string()),
        ("data", pa.binary()),
        ("sender", pa.string()),
        ("force", pa.bool_()),
        ("bucket", pa.int32()),
        ("size", pa.int32()),
    ]
)
ARROW_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("seq", pa.int64()),
        ("subject", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("data", pa.binary()),
    ]
)


def to_sampling_batch(
    stream: str, msgs: Sequence[RawMessage], extractor: SenderExtractor, buckets: int
) -> pa.RecordBatch:
    """What the sampling rules decide on, without payloads or headers: a sampled batch's rows
    are shuffled to the senders' state and collected by the driver, and 9 KB payloads made that
    Spark's heaviest work; the driver reads the copies' payloads back from the stream
    (replicator.spark.sampling.SamplingSink)."""
    senders, forces, bucket_ids = [], [], []
    for m in msgs:
        sender, force = extractor.extract(m.subject, m.headers, m.data)
        senders.append(sender)
        forces.append(force)
        # Messages without a sender are spread by sequence; they are always copied.
        bucket_ids.append(bucket_of(sender if sender is not None else str(m.seq), buckets))
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream] * len(msgs), pa.string()),
            pa.array([m.seq for m in msgs], pa.int64()),
            pa.array([m.subject for m in msgs], pa.string()),
            pa.array([m.ts_ns // 1_000_000 for m in msgs], pa.int64()),
            pa.nulls(len(msgs), pa.string()),
            pa.nulls(len(msgs), pa.binary()),
            pa.array(senders, pa.string()),
            pa.array(forces, pa.bool_()),
            pa.array(bucket_ids, pa.int32()),
            pa.array([len(m.data) for m in msgs], pa.int32()),
        ],
        schema=SAMPLING_ARROW_SCHEMA,
    )


def clock_batch(stream: str, clock_ms: int, buckets: int) -> pa.RecordBatch:
    n = buckets
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream] * n, pa.string()),
            pa.array([-(i + 1) for i in range(n)], pa.int64()),
            pa.array([""] * n, pa.string()),
            pa.array([clock_ms] * n, pa.int64()),
            pa.array([None] * n, pa.string()),
            pa.array([b""] * n, pa.binary()),
            pa.array([None] * n, pa.string()),
            pa.array([False] * n, pa.bool_()),
            pa.array(list(range(n)), pa.int32()),
            pa.array([0] * n, pa.int32()),
        ],
        schema=SAMPLING_ARROW_SCHEMA,
    )


def to_record_batch(stream: str, msgs: Sequence[RawMessage]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream] * len(msgs), pa.string()),
            pa.array([m.seq for m in msgs], pa.int64()),
            pa.array([m.subject for m in msgs], pa.string()),
            pa.array([m.ts_ns // 1000 for m in msgs], pa.timestamp("us", tz="UTC")),
            pa.array(
                [m.headers or None for m in msgs],
                pa.map_(pa.string(), pa.string()),
            ),
            pa.array([m.data for m in msgs], pa.binary()),
        ],
        schema=ARROW_SCHEMA,
    )
