"""The rows the sampling rules hand to a sampled entry's sink (replicator.spark.sampling), built
by hand: a test drives the sink with real servers and no Spark."""

from __future__ import annotations

import pyarrow as pa

from replicator.spark.sampling import KIND_COPY, KIND_STATS

# The columns of the rules' rows the sink reads (replicator.spark.sampling.OUTPUT_SCHEMA).
ROWS = pa.schema(
    [("kind", pa.string()), ("seq", pa.int64()), ("ts_ms", pa.int64()), ("event", pa.string()),
     ("subject", pa.string()), ("event_id", pa.string()), ("data", pa.binary()), ("size", pa.int64()),
     ("warned", pa.int32()), ("unkeyed", pa.int32()), ("forced", pa.int32()), ("received", pa.int32()),
     ("received_bytes", pa.int64()), ("due_ms", pa.int64())]
)  # fmt: skip


def decided(copies: list[tuple[int, int]], last_seq: int) -> pa.Table:
    """The rows of one batch: a copy row per (sequence, time in ms), and one bucket's stats."""
    rows = [{"kind": KIND_COPY, "seq": seq, "ts_ms": ts_ms, "size": 100} for seq, ts_ms in copies]
    rows.append({"kind": KIND_STATS, "seq": last_seq, "ts_ms": copies[-1][1], "size": len(copies),
                 "warned": 0, "unkeyed": 0, "forced": 0, "received": last_seq, "received_bytes": 10_000})  # fmt: skip
    return pa.Table.from_pylist(rows, ROWS)
