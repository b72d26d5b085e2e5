"""Arrow record batches of the `nats-jetstream` source's rows (apart from the source itself, so
that only the processes that read messages import pyarrow).

Headers keep every value of a repeated name, in order: a map column of (name, value) entries
(Arrow and Spark keep a map's entries as given). Arrow's and Spark's strings are UTF-8, so a
message with a header value that is not has `headers` with each bad byte as U+FFFD, for reading,
and `header_bytes` with every value's bytes as stored, which its copy is made from; for any
other message `header_bytes` is null. A sampled row carries neither headers nor payload (see
to_sampling_batch).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from replicator.nats.readers import RawMessage
from replicator.nats.wire import Headers, is_utf8, readable_value, value_bytes, value_text
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
        ("header_bytes", pa.map_(pa.string(), pa.binary())),
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
    headers: list[Headers | None] = [m.headers or None for m in msgs]
    header_bytes: list[list[tuple[str, bytes]] | None] = [None] * len(msgs)
    for i, h in enumerate(headers):
        if h and not all(is_utf8(v) for _, v in h):
            headers[i] = [(k, readable_value(v)) for k, v in h]
            header_bytes[i] = [(k, value_bytes(v)) for k, v in h]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream] * len(msgs), pa.string()),
            pa.array([m.seq for m in msgs], pa.int64()),
            pa.array([m.subject for m in msgs], pa.string()),
            pa.array([m.ts_ns // 1000 for m in msgs], pa.timestamp("us", tz="UTC")),
            pa.array(headers, pa.map_(pa.string(), pa.string())),
            pa.array([m.data for m in msgs], pa.binary()),
            pa.array(header_bytes, pa.map_(pa.string(), pa.binary())),
        ],
        schema=ARROW_SCHEMA,
    )


def copied_headers(table: pa.Table) -> list[Headers | None]:
    """Each row's headers as its source message holds them, for its copy: `headers`, or where
    a value was not UTF-8 the values' bytes from `header_bytes` (read back as wire.value_text
    reads them)."""
    headers: list[Headers | None] = table.column("headers").to_pylist()
    exact = table.column("header_bytes")
    if exact.null_count == len(exact):
        return headers
    for i, pairs in enumerate(exact.to_pylist()):
        if pairs is not None:
            headers[i] = [(k, value_text(v)) for k, v in pairs]
    return headers
