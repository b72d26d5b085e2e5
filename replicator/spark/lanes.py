"""`order: subject`: a copy batch published by the executors, one lane per task.

The batch is hashed by subject into `lanes` partitions (Spark's shuffle) and each is sorted by
source sequence; every task publishes its lane on a connection of its own, in rounds (one copy
of each target subject per round, the next round once the last is acknowledged:
replicator.lane_rounds), and ends when every copy is acknowledged. Messages of one subject keep
their order, as a partitioned Choria deployment gives; across subjects they do not. The payloads
no longer pass through the driver, whose one process is the ceiling of `order: stream`.

A batch cut short (a refused copy, a failed task, a crash) is published again from the
checkpoint. Lanes publish side by side, so copies are not chained with
Nats-Expected-Last-Sequence, and the deterministic Nats-Msg-Id drops a copy stored again only
within the target's duplicate window. So a batch that may be a replay (the first of a query,
one after a failure, a task's second attempt) first asks the target's stream leader for the
last copy on each of its subjects and skips what the rounds say is there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.headers import message_id
from replicator.lane_rounds import held_by_target, rounds
from replicator.nats.publisher import PublishError
from replicator.spark.rows import copied_headers, copied_subjects
from replicator.spark.sink import BatchResult, SinkSettings, copy_header_lines
from replicator.subjects import rewrite_subject

# What each lane task returns to the driver, for the metrics.
LANE_RESULT = pa.schema(
    [(name, pa.int64()) for name in ("rows", "bytes", "copied", "copied_bytes", "duplicates", "last_seq")]
)
# The same, as Spark's mapInArrow takes it (public API: a DDL string).
LANE_RESULT_DDL = ", ".join(f"{name} long" for name in LANE_RESULT.names)


def lane_messages(table: pa.Table, s: SinkSettings) -> Iterator[tuple[str, bytes, bytes]]:
    """(subject, payload, header lines) of each copy, in the table's order."""
    ts_ms = pc.divide(pc.cast(table.column("timestamp"), pa.int64()), 1000).to_pylist()
    columns = zip(
        copied_subjects(table),
        table.column("seq").to_pylist(),
        copied_headers(table),
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


async def last_copied_on_subjects(nc: Any, s: SinkSettings, subjects: list[str]) -> dict[str, int]:
    """Target subject -> source sequence of this entry's last copy on it, as the target stream's
    leader has it (subjects whose last message is none or not this entry's are left out)."""
    import asyncio

    from replicator.headers import MSG_ID_HEADER, SOURCE_HEADER, parse_source_header
    from replicator.nats.readers import leader_last_on_subject
    from replicator.nats.wire import first_value, is_utf8

    owner, limit = s.owner, asyncio.Semaphore(64)

    async def one(subject: str) -> tuple[str, int]:
        if not is_utf8(subject):
            # Asked in JSON, the server would look up its U+FFFD form, another subject: none of
            # its copies is counted as stored, so the duplicate window drops those that are.
            return subject, 0
        async with limit:
            m = await leader_last_on_subject(nc, s.target_stream, subject)
        if m is None:
            return subject, 0
        mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
        msg_id = first_value(m.headers, MSG_ID_HEADER)
        # This entry's copy of this source stream (its Nats-Msg-Id names the stream's creation:
        # a copy of a deleted and recreated stream of the same name does not vouch).
        if (
            mark is None
            or not owner.owns(mark, msg_id)
            or msg_id != message_id(s.stream_identity, mark.sequence)
        ):
            return subject, 0
        return subject, mark.sequence

    return {subject: seq for subject, seq in await asyncio.gather(*(one(x) for x in subjects)) if seq}


def _publish_in_rounds(table: pa.Table, s: SinkSettings, may_replay: bool) -> dict[str, int]:
    """Publish one lane (its rows in source order) in rounds; the lane's counts."""
    loop, publisher = _publisher(s)
    seqs = table.column("seq").to_pylist()
    subjects = copied_subjects(table)
    sizes = pc.binary_length(table.column("data")).to_pylist()
    targets = [rewrite_subject(x, s.subject_prefix, s.subject_remove) for x in subjects]
    rows = list(range(len(seqs)))
    duplicates = 0
    if may_replay:
        distinct = sorted(set(targets))
        last = loop.run(
            last_copied_on_subjects(publisher.nc, s, distinct), s.ack_timeout + len(distinct) / 100
        )
        held = held_by_target(
            targets, subjects, seqs, last, one_source_subject_per_target=not s.subject_remove
        )
        rows = [i for i in rows if not held[i]]
        duplicates = len(seqs) - len(rows)
    messages = list(lane_messages(table.take(pa.array(rows, pa.int64())), s))
    for round_rows in rounds([targets[i] for i in rows]):  # positions in `rows` and `messages`
        outcome = loop.run(
            publisher.publish([messages[k] for k in round_rows], s.ack_timeout + len(round_rows) / 1000), None
        )
        first = outcome.first_failure()
        if first is not None:
            raise PublishError(
                f"target stream {s.target_stream} refused source sequence {seqs[rows[round_rows[first.index]]]}: "
                f"{first.reason}; the batch will be published again"
            )
        duplicates += outcome.duplicates
    return {
        "rows": len(seqs),
        "bytes": sum(sizes),
        "copied": len(rows),
        "copied_bytes": sum(sizes[i] for i in rows),
        "duplicates": duplicates,
        "last_seq": max(seqs),
    }


def _second_attempt() -> bool:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx is not None and ctx.attemptNumber() > 0


def publish_lane(
    s: SinkSettings, may_replay: bool = True
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function `mapInArrow` runs on each lane: publish it in rounds, return its counts.
    `may_replay`: the batch may have been published before (see the module docstring)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # The whole lane at once: rounds and the replay check span every chunk Spark hands over,
        # and nothing is published before the lane's input is read whole.
        chunks = [b for b in batches if b.num_rows]
        counts = {"rows": 0, "bytes": 0, "copied": 0, "copied_bytes": 0, "duplicates": 0, "last_seq": 0}
        if chunks:
            table = pa.Table.from_batches(chunks).combine_chunks()
            counts.update(_publish_in_rounds(table, s, may_replay or _second_attempt()))
        yield pa.RecordBatch.from_pydict({k: [v] for k, v in counts.items()}, schema=LANE_RESULT)

    return run


class LaneSink:
    """Callable for `foreachBatch`: the batch's lanes published by Spark's tasks."""

    def __init__(self, settings: SinkSettings, lanes: int, account: Callable[[BatchResult], None]) -> None:
        self.settings = settings
        self.lanes = lanes
        self.account = account  # the stream's metrics and totals (OrderedSink.account)
        self._next_clean: int | None = None  # the batch after the last one published whole

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        # Anything but the batch after one this sink published whole may be a replay.
        may_replay, self._next_clean = self._next_clean != batch_id, None
        lanes = batch_df.repartition(self.lanes, "subject").sortWithinPartitions("seq")
        # Each lane's counts straight to the driver, summed here: no shuffle after the publishing
        # stage, whose lost output would make Spark run a lane again as a first attempt.
        counts = [r.asDict() for r in lanes.mapInArrow(publish_lane(self.settings, may_replay),
                                                        LANE_RESULT_DDL).collect()]  # fmt: skip
        total = {name: sum(int(c[name] or 0) for c in counts) for name in LANE_RESULT.names}
        self.account(
            BatchResult(
                received=total["rows"],
                received_bytes=total["bytes"],
                copied=total["copied"],
                copied_bytes=total["copied_bytes"],
                duplicates=total["duplicates"],
                last_seq=max((int(c["last_seq"] or 0) for c in counts), default=0),
                seconds=time.monotonic() - started,
            )
        )
        self._next_clean = batch_id + 1
