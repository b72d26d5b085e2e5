"""Arrow record batches of the `nats-jetstream` source's rows (apart from the source itself, so
that only the processes that read messages import pyarrow).

Headers keep every value of a repeated name, in order: a map column of (name, value) entries
(Arrow and Spark keep a map's entries as given). Arrow's and Spark's strings are UTF-8, so a
message whose subject or a header value is not has it in `subject` or `headers` with each bad
byte as U+FFFD, for reading, and its bytes as stored in `subject_bytes` or `header_bytes` (every
value), which its copy is made from; for any other message those two are null. A sampled row
carries neither headers nor payload, and its subject only as text (see to_sampling_batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from replicator.nats.readers import RawMessage
from replicator.nats.wire import Headers, is_utf8, readable, wire_bytes, wire_text
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
        ("subject_bytes", pa.binary()),
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
            pa.array([readable(m.subject) for m in msgs], pa.string()),
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
    subjects = [m.subject for m in msgs]
    subject_bytes: list[bytes | None] = [None] * len(msgs)
    for i, subject in enumerate(subjects):
        if not is_utf8(subject):
            subjects[i] = readable(subject)
            subject_bytes[i] = wire_bytes(subject)
    headers: list[Headers | None] = [m.headers or None for m in msgs]
    header_bytes: list[list[tuple[str, bytes]] | None] = [None] * len(msgs)
    for i, h in enumerate(headers):
        if h and not all(is_utf8(v) for _, v in h):
            headers[i] = [(k, readable(v)) for k, v in h]
            header_bytes[i] = [(k, wire_bytes(v)) for k, v in h]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream] * len(msgs), pa.string()),
            pa.array([m.seq for m in msgs], pa.int64()),
            pa.array(subjects, pa.string()),
            pa.array([m.ts_ns // 1000 for m in msgs], pa.timestamp("us", tz="UTC")),
            pa.array(headers, pa.map_(pa.string(), pa.string())),
            pa.array([m.data for m in msgs], pa.binary()),
            pa.array(header_bytes, pa.map_(pa.string(), pa.binary())),
            pa.array(subject_bytes, pa.binary()),
        ],
        schema=ARROW_SCHEMA,
    )


def _exact_where_given(
    table: pa.Table, column: str, exact_column: str, read: Callable[[Any], Any]
) -> list[Any]:
    """`column`'s values, each replaced by `read` of `exact_column`'s where that is not null."""
    values: list[Any] = table.column(column).to_pylist()
    exact = table.column(exact_column)
    if exact.null_count == len(exact):
        return values
    for i, raw in enumerate(exact.to_pylist()):
        if raw is not None:
            values[i] = read(raw)
    return values


def copied_subjects(table: pa.Table) -> list[str]:
    """Each row's subject as its source message has it, for its copy: `subject`, or where it was
    not UTF-8 its bytes from `subject_bytes` (read back as wire.wire_text reads them)."""
    return _exact_where_given(table, "subject", "subject_bytes", wire_text)


def copied_headers(table: pa.Table) -> list[Headers | None]:
    """Each row's headers as its source message holds them, for its copy: `headers`, or where
    a value was not UTF-8 the values' bytes from `header_bytes` (read back as wire.wire_text
    reads them)."""
    return _exact_where_given(
        table, "headers", "header_bytes", lambda pairs: [(k, wire_text(v)) for k, v in pairs]
    )
