"""A bucket's function (replicator.spark.sampling.bucket_function) without Spark: frames shaped as
pyspark hands them (the sampled columns through Arrow to pandas, clock rows first, data rows in
no particular order), pyspark's own GroupState carried from batch to batch, and its copies and
advisories over every bucket beside the plain rules (replicator.sampling.reference)."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import BinaryType, StructField, StructType

from replicator.sampling.extract import bucket_of
from replicator.sampling.reference import reference
from replicator.sampling.rules import Message, SamplingParams
from replicator.spark.sampling import DECIDE_COLUMNS, KIND_ADVISORY, KIND_COPY, bucket_function

BUCKETS = 4
PARAMS = SamplingParams(
    inspect_ms=60_000, warn_ms=20_000, size_trigger=100, stream="REG", advisory_subject="adv.%s.%v"
)


def _group_state(value: Any) -> GroupState:
    return GroupState(
        optionalValue=value,
        batchProcessingTimeMs=0,
        eventTimeWatermarkMs=-1,
        timeoutConf=GroupStateTimeout.NoTimeout,
        hasTimedOut=False,
        watermarkPresent=False,
        defined=value is not None,
        updated=False,
        removed=False,
        timeoutTimestamp=-1,
        keyAsUnsafe=b"",
        valueSchema=StructType([StructField("table", BinaryType())]),
    )


def _frame(bucket: int, msgs: list[Message], clock_ms: int, rng: random.Random) -> Any:
    rows = [(bucket, -(bucket + 1), clock_ms, None, False, 0)]  # the batch's clock row (rows.clock_batch)
    data = [(bucket, m.seq, m.ts_ms, m.sender, m.force, m.size) for m in msgs]
    rng.shuffle(data)  # a shuffle keeps no order within a group
    columns = list(zip(*(rows + data), strict=True))
    types = [pa.int32(), pa.int64(), pa.int64(), pa.string(), pa.bool_(), pa.int32()]
    table = pa.table(
        [pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=list(DECIDE_COLUMNS)
    )
    return table.to_pandas()


def _fleet(rng: random.Random, n: int) -> list[Message]:
    msgs, ts = [], 1_000_000
    for seq in range(1, n + 1):
        ts += rng.choice([10, 200, 1_000, 5_000, 25_000])  # gaps past warn_ms now and then
        sender = None if rng.random() < 0.03 else f"node{rng.randrange(30)}"
        msgs.append(Message(seq, sender, ts, rng.choice([1000, 1050, 1300]), rng.random() < 0.05))
    return msgs


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_buckets_copies_and_advisories_are_the_plain_rules_over_batches(seed: int) -> None:
    rng = random.Random(seed)
    msgs = _fleet(rng, 600)
    decide = bucket_function(PARAMS)
    states: dict[int, Any] = {}
    copies: list[int] = []
    advisories: list[tuple[str, int]] = []
    i = 0
    while i < len(msgs):
        batch = msgs[i : i + rng.randrange(1, 60)]
        i += len(batch)
        clock_ms = batch[-1].ts_ms
        for bucket in range(BUCKETS):
            mine = [m for m in batch if bucket_of(m.sender or str(m.seq), BUCKETS) == bucket]
            state = _group_state(states.get(bucket))
            for out in decide((bucket,), iter([_frame(bucket, mine, clock_ms, rng)]), state):
                for kind, seq, ts_ms, subject in zip(
                    out["kind"], out["seq"], out["ts_ms"], out["subject"], strict=True
                ):
                    if kind == KIND_COPY:
                        copies.append(int(seq))
                    elif kind == KIND_ADVISORY:
                        advisories.append((str(subject), int(ts_ms)))
            if state._removed:
                states.pop(bucket, None)
            elif state._defined:
                states[bucket] = state._value
    want_copies, want_advisories = reference(msgs, msgs[-1].ts_ms, PARAMS)
    assert sorted(copies) == want_copies
    # Each advisory's subject names its event and sender; which message surfaced it depends on
    # the batches (replicator.sampling.reference.advisory_key).
    assert sorted(advisories) == sorted(
        (a.subject(PARAMS.advisory_subject), a.event_ms) for a in want_advisories
    )
    assert len(set(copies)) == len(copies)
    assert {s.split(".")[1] for s, _ in advisories} == {"new", "timeout", "recover", "expire"}
