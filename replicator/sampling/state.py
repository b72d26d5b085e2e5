"""A bucket's sender table as bytes: the value kept per bucket in Spark's state store.

Version 2 is an Arrow IPC stream of one record batch with named columns (sender, seen_ms,
copied_ms, size, warned, and first_ms and recovered_ms, added since) and, in the schema's
metadata, the bucket's event-time clock, the encoding's version and the senders that recently
left the table (JSON: sender -> when). A later version may add columns or metadata: a reader
fills a column a blob lacks with its default, and ignores columns and keys it does not know, so
checkpoints written before and after such a change stay readable both ways.

Version 1 (the first releases) pickled a positional tuple; it is still read, and rewritten as
version 2 the next time its bucket changes.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pyarrow as pa

from replicator.sampling.rules import SenderTable

VERSION = 2
_VERSION_KEY = b"sr.sender_table.version"
_CLOCK_KEY = b"sr.sender_table.clock_ms"
_EXPIRED_KEY = b"sr.sender_table.expired"
_PICKLE_PROTOCOL_5 = b"\x80\x05"

# Column name -> (Arrow type, numpy dtype, default for rows of a blob without the column).
_COLUMNS: dict[str, tuple[pa.DataType, Any, Any]] = {
    "seen_ms": (pa.int64(), np.int64, 0),
    "copied_ms": (pa.int64(), np.int64, 0),
    "size": (pa.int64(), np.int64, 0),
    "warned": (pa.bool_(), bool, False),
    "first_ms": (pa.int64(), np.int64, 0),  # added after the first v2 releases: 0 where absent
    "recovered_ms": (pa.int64(), np.int64, 0),  # added with first_ms's successor release
}


class StateEncodingError(ValueError):
    pass


def encode(table: SenderTable) -> bytes:
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(table.keys, pa.string()),
            pa.array(table.seen, pa.int64()),
            pa.array(table.copied, pa.int64()),
            pa.array(table.size, pa.int64()),
            pa.array(table.warned, pa.bool_()),
            pa.array(table.first, pa.int64()),
            pa.array(table.recovered, pa.int64()),
        ],
        schema=pa.schema(
            [("sender", pa.string()), *((name, t) for name, (t, _, _) in _COLUMNS.items())],
            metadata={
                _VERSION_KEY: str(VERSION).encode(),
                _CLOCK_KEY: str(table.clock_ms).encode(),
                **({_EXPIRED_KEY: json.dumps(table.expired).encode()} if table.expired else {}),
            },
        ),
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def decode(blob: bytes | None) -> SenderTable:
    if not blob:
        return SenderTable()
    if blob[:2] == _PICKLE_PROTOCOL_5:
        return _decode_v1(blob)
    try:
        reader = pa.ipc.open_stream(blob)
        batches = list(reader)
    except pa.ArrowInvalid as e:
        raise StateEncodingError(f"sampling state is neither version 1 nor an Arrow stream: {e}") from None
    meta = reader.schema.metadata or {}
    version = int(meta.get(_VERSION_KEY, b"0"))
    if version < 2:
        raise StateEncodingError(f"sampling state of unknown version {version}")
    arrow = pa.Table.from_batches(batches, reader.schema)
    n = arrow.num_rows

    def column(name: str) -> np.ndarray:
        _, dtype, default = _COLUMNS[name]
        if name in arrow.column_names:
            # A copy: the rules update the columns in place, and Arrow's buffers are read-only.
            return np.array(arrow.column(name).to_numpy(zero_copy_only=False), dtype=dtype)
        return np.full(n, default, dtype=dtype)

    return SenderTable(
        keys=arrow.column("sender").to_pylist(),
        seen=column("seen_ms"),
        copied=column("copied_ms"),
        size=column("size"),
        warned=column("warned"),
        first=column("first_ms"),
        recovered=column("recovered_ms"),
        expired=json.loads(meta[_EXPIRED_KEY]) if _EXPIRED_KEY in meta else {},
        clock_ms=int(meta.get(_CLOCK_KEY, b"0")),
    )


def _decode_v1(blob: bytes) -> SenderTable:
    # Our own checkpoint's bytes, written by version 1 of this module.
    keys, seen, copied, size, warned, clock = pickle.loads(blob)
    return SenderTable(list(keys), seen, copied, size, warned, int(clock))
