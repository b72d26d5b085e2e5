"""What the sampling sink takes from the rules' rows: which copies, how many messages were
decided, and up to where the batch is handled (no Spark: the rows as the driver collects them)."""

from __future__ import annotations

import pyarrow as pa

from replicator.spark.sampling import KIND_ADVISORY, KIND_COPY, KIND_STATS, DecidedBatch

SCHEMA = pa.schema(
    [("kind", pa.string()), ("seq", pa.int64()), ("ts_ms", pa.int64()), ("event", pa.string()),
     ("received", pa.int32()), ("received_bytes", pa.int64()), ("due_ms", pa.int64()), ("size", pa.int64())]
)  # fmt: skip


def rows(*r: tuple) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, (*x, None, None)[:8], strict=True)) for x in r], SCHEMA
    )


def test_a_batch_is_handled_up_to_its_last_message_across_buckets_copies_ascending() -> None:
    batch = DecidedBatch.of(rows(
        (KIND_COPY, 17, 5, None, None, None, None, 1800),
        (KIND_STATS, 17, 9, None, 3, 3000),  # bucket 0: messages 4, 9, 17
        (KIND_ADVISORY, 17, 7, "new", None, None),
        (KIND_COPY, 4, 1, None, None, None, None, 1200),
        (KIND_STATS, -1, 9, None, 0, 0),  # bucket 1: no message this batch
        (KIND_ADVISORY, -1, 6, "timeout", None, None),
        (KIND_STATS, 21, 9, None, 2, 1500),  # bucket 2: messages 12, 21
    ))  # fmt: skip
    assert batch.copies == [4, 17]
    assert batch.copy_times_ms == [1, 5]  # each copy's time as the rules saw it, beside it
    assert batch.copy_sizes == [1200, 1800]  # and its payload's size
    assert (batch.received, batch.received_bytes, batch.last_seq) == (5, 4500, 21)
    assert batch.advisories.column("event").to_pylist() == ["timeout", "new"]  # event time order


def test_a_batch_of_clock_rows_only_has_nothing_to_handle() -> None:
    batch = DecidedBatch.of(rows((KIND_STATS, -1, 9, None, 0, 0), (KIND_STATS, -1, 9, None, 0, 0)))
    assert (batch.copies, batch.received, batch.received_bytes, batch.last_seq) == ([], 0, 0, -1)


def test_the_clock_is_due_to_move_when_the_first_bucket_says() -> None:
    batch = DecidedBatch.of(rows(
        (KIND_STATS, -1, 9, None, 0, 0, 500),
        (KIND_STATS, -1, 9, None, 0, 0, None),  # a bucket nothing will change
        (KIND_STATS, -1, 9, None, 0, 0, 120),
        (KIND_ADVISORY, -1, 6, "timeout", None, None, None),
    ))  # fmt: skip
    assert (batch.clock_ms, batch.due_ms) == (9, 120)
    quiet = DecidedBatch.of(rows((KIND_STATS, -1, 9, None, 0, 0, None)))
    assert (quiet.clock_ms, quiet.due_ms) == (9, None)
