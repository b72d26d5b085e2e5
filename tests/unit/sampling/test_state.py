"""The per-bucket sender table's encoding in Spark's state store: named, versioned columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from replicator.sampling import state
from replicator.sampling.rules import Message, SamplingParams, SenderTable

S = 1000
P = SamplingParams(inspect_ms=3600 * S, warn_ms=1800 * S)
FIXTURES = Path(__file__).parent / "fixtures"


def _table() -> SenderTable:
    t = SenderTable()
    t.process([Message(i, f"n{i % 7}", i * S, 1000 + i) for i in range(50)], 50 * S, P)
    return t


def test_a_table_survives_encoding() -> None:
    table = _table()
    again = state.decode(state.encode(table))
    assert sorted(again.rows()) == sorted(table.rows()) and again.clock_ms == table.clock_ms
    assert len(state.decode(None)) == 0 and len(state.decode(b"")) == 0


def test_a_checkpoint_written_by_the_previous_encoding_is_read() -> None:
    # Written by version 1 (a pickled positional tuple) before the encoding changed.
    blob = (FIXTURES / "sender_table_v1.pickle").read_bytes()
    table = state.decode(blob)
    assert table.clock_ms == 1_700_001_950_000
    rows = sorted(table.rows())
    assert rows[0] == ("node0.example.net", 1_700_000_000_000, 1_700_000_000_000, 1000, True, 0, 0)
    assert rows[4] == ("node4.example.net", 1_700_001_950_000, 1_700_000_004_000, 2000, False, 0, 0)
    # ...and it carries on: node0 expires on the clock as it would have.
    advs = table.advance(1_700_000_000_000 + 3600 * S, P)
    assert [(str(a.event), a.sender) for a in advs] == [("expire", "node0.example.net")]
    assert sorted(state.decode(state.encode(table)).rows()) == sorted(table.rows())


def _with_columns(blob: bytes, change: dict[str, pa.Array | None]) -> bytes:
    """The blob as a later (or earlier) version of the encoding would write it."""
    reader = pa.ipc.open_stream(blob)
    batch = next(iter(reader))
    cols = {n: batch.column(n) for n in batch.schema.names}
    for name, arr in change.items():
        if arr is None:
            cols.pop(name)
        else:
            cols[name] = arr
    out = pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))
    out = out.replace_schema_metadata(reader.schema.metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, out.schema) as w:
        w.write_batch(out)
    return sink.getvalue().to_pybytes()


def test_a_column_added_later_is_ignored_and_one_missing_gets_its_default() -> None:
    table = _table()
    blob = state.encode(table)
    n = len(table)
    newer = _with_columns(blob, {"next_field": pa.array(np.arange(n))})
    assert sorted(state.decode(newer).rows()) == sorted(table.rows())
    older = _with_columns(blob, {"warned": None})
    assert [r[4] for r in state.decode(older).rows()] == [False] * n


def test_bytes_of_neither_encoding_are_a_clear_error() -> None:
    with pytest.raises(state.StateEncodingError, match="neither version 1 nor an Arrow stream"):
        state.decode(b"not a table")


def test_first_seen_is_kept_and_a_table_written_before_it_reads_as_not_known() -> None:
    table = _table()
    assert {r[0]: r[5] for r in table.rows()}["n3"] == 3 * S  # n3's first message
    assert [r[5] for r in state.decode(_with_columns(state.encode(table), {"first_ms": None})).rows()] == [
        0
    ] * len(table)


def test_recoveries_and_recent_expiries_are_kept_and_a_table_written_before_them_reads_as_none() -> None:
    table = _table()
    # n1 falls silent past warn (timed out), comes back (recovered); n2 stays silent (expires).
    quiet = [Message(100 + i, f"n{i % 7}", (60 + i) * S, 1000) for i in range(7) if i not in (1, 2)]
    table.process(quiet, 2000 * S, P)
    table.process([Message(200, "n1", 2000 * S, 1000)], 2000 * S, P)
    table.process([], 3650 * S, P)
    recovered = {r.sender: r.recovered_ms for r in table.rows()}
    assert recovered["n1"] == 2000 * S and recovered["n0"] == 0
    assert table.expired == {"n2": 44 * S + P.inspect_ms}  # n2's last message, at 44 s
    again = state.decode(state.encode(table))
    assert sorted(again.rows()) == sorted(table.rows()) and again.expired == table.expired
    before = state.decode(_with_columns(state.encode(_table()), {"recovered_ms": None}))
    assert {r.recovered_ms for r in before.rows()} == {0} and before.expired == {}
