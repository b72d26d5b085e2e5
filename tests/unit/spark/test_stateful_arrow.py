"""The sampled rules' worker without pandas (replicator.spark.stateful_arrow) against pyspark's own
applyInPandasWithState worker code: the same Arrow batches in, laid out as Spark's JVM sends them
(each group's rows and its state, groups split into chunks across batches), give the same Arrow
batches out, rows, states and padding, batch after batch with the states carried forward."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pyspark
import pyspark.worker as pyspark_worker
import pytest
from pyspark.serializers import CloudPickleSerializer, CPickleSerializer
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)
from pyspark.util import PythonEvalType
from pyspark.worker import EvalConf, RunnerConf
from pyspark.worker_message import UDFInfo

from replicator.sampling.extract import bucket_of
from replicator.sampling.rules import Message, SamplingParams
from replicator.spark import stateful_arrow
from replicator.spark.sampling import DECIDE_COLUMNS, OUTPUT_SCHEMA, STATE_SCHEMA, bucket_function

BUCKETS = 4
PARAMS = SamplingParams(
    inspect_ms=60_000, warn_ms=20_000, size_trigger=100, stream="REG", advisory_subject="adv.%s.%v"
)
_SPARK_TYPES = {"STRING": StringType(), "BIGINT": LongType(), "INT": IntegerType(), "BINARY": BinaryType()}
# bucket is the grouping key and the first value: Spark's offsets [length, keys, *keys, *values].
ARG_OFFSETS = [8, 1, 0, 0, 1, 2, 3, 4, 5]
STATE_INFO = pa.struct(
    [
        ("properties", pa.string()),
        ("keyRowAsUnsafe", pa.binary()),
        ("object", pa.binary()),
        ("startOffset", pa.int32()),
        ("numRows", pa.int32()),
        ("isLastChunk", pa.bool_()),
    ]
)
# pyspark's own code (the reference here) pads its pandas output with all-NA rows; pandas 2 warns.
pytestmark = pytest.mark.filterwarnings("ignore:The behavior of DataFrame concatenation:FutureWarning")
DATA_TYPES = [pa.int32(), pa.int64(), pa.int64(), pa.string(), pa.bool_(), pa.int32()]


def _struct(ddl: str) -> StructType:
    return StructType(
        [StructField(n, _SPARK_TYPES[t]) for n, t in (f.strip().split() for f in ddl.split(","))]
    )


def _functions(max_records: int) -> tuple[Any, Any]:
    """pyspark's own function for the task, and this module's, from the same UDF as Spark sends it."""
    command = CloudPickleSerializer().dumps((bucket_function(PARAMS), _struct(OUTPUT_SCHEMA)))
    info = UDFInfo(udfs=[memoryview(command)], args=ARG_OFFSETS, kwargs={}, result_id=0)
    runner = RunnerConf(
        {
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(max_records),
            "spark.sql.session.timeZone": "UTC",
        }
    )
    evals = EvalConf({"state_value_schema": _struct(STATE_SCHEMA).json()})
    eval_type = PythonEvalType.SQL_GROUPED_MAP_PANDAS_UDF_WITH_STATE
    read_udfs = getattr(pyspark_worker.read_udfs, "pyspark_read_udfs", pyspark_worker.read_udfs)
    theirs = read_udfs(CPickleSerializer(), [info], eval_type, runner, evals)[0]
    ours = stateful_arrow.arrow_stateful(CPickleSerializer(), [info], runner, evals)
    assert ours is not None
    return theirs, ours


def _properties(exists: bool) -> str:
    return json.dumps(
        {
            "batchProcessingTimeMs": 0,
            "eventTimeWatermarkMs": -1,
            "timeoutConf": "NoTimeout",
            "hasTimedOut": False,
            "watermarkPresent": False,
            "defined": exists,
            "updated": False,
            "removed": False,
            "timeoutTimestamp": -1,
        }
    )


def _input(
    groups: list[tuple[int, list[tuple[Any, ...]]]], states: dict[int, bytes | None], rng: random.Random
) -> list[pa.RecordBatch]:
    """The groups' rows as Spark sends them: batches of rows with one state-info row per chunk,
    a group cut into chunks now and then, a chunk now and then in the next batch."""
    batches, rows, infos = [], [], []

    def flush() -> None:
        if not rows:
            return
        columns = [pa.array(c, t) for c, t in zip(zip(*rows, strict=True), DATA_TYPES, strict=True)]
        info = pa.array(infos + [None] * (len(rows) - len(infos)), STATE_INFO)
        batches.append(pa.RecordBatch.from_arrays([*columns, info], names=[*DECIDE_COLUMNS, "state"]))
        rows.clear()
        infos.clear()

    for bucket, group in groups:
        blob = states.get(bucket)
        obj = CPickleSerializer().dumps((blob,)) if blob is not None else None
        cuts = sorted(rng.sample(range(1, len(group)), min(2, len(group) - 1))) if rng.random() < 0.5 else []
        for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(group)], strict=True)):
            infos.append(
                {
                    "properties": _properties(blob is not None),
                    "keyRowAsUnsafe": f"key{bucket}".encode(),
                    "object": obj,
                    "startOffset": len(rows),
                    "numRows": b - a,
                    "isLastChunk": i == len(cuts),
                }
            )
            rows.extend(group[a:b])
            if rng.random() < 0.3:
                flush()
    flush()
    return batches


def _fleet(rng: random.Random, n: int) -> list[Message]:
    msgs, ts = [], 1_000_000
    for seq in range(1, n + 1):
        # Mostly within inspect_ms of each sender's last copy, now and then past warn_ms.
        ts += rng.choice([10, 10, 50, 200, 1_000]) if rng.random() < 0.97 else 30_000
        sender = None if rng.random() < 0.03 else f"node{rng.randrange(12)}"
        msgs.append(Message(seq, sender, ts, rng.choice([1000, 1050, 1300]), rng.random() < 0.05))
    return msgs


def _states_out(batches: list[pa.RecordBatch]) -> dict[bytes, bytes | None]:
    """Each group's state as the function left it (by its key row), from its output batches."""
    out = {}
    for b in batches:
        n = b.column("_0")[0]["stateCount"].as_py()
        for s in b.column("_2").to_pylist()[:n]:
            exists = json.loads(s["properties"])["defined"] and not json.loads(s["properties"])["removed"]
            out[s["keyRowAsUnsafe"]] = (
                CPickleSerializer().loads(s["object"])[0] if exists and s["object"] else None
            )
    return out


@pytest.mark.parametrize(("seed", "max_records"), [(1, 10_000), (2, 3), (3, 1)])
def test_the_same_batches_out_as_pysparks_own_worker(seed: int, max_records: int) -> None:
    rng = random.Random(seed)
    theirs, ours = _functions(max_records)
    msgs = _fleet(rng, 1500)
    states: dict[int, bytes | None] = {}
    i = batches_compared = 0
    while i < len(msgs):
        batch = msgs[i : i + rng.randrange(1, 60)]
        i += len(batch)
        groups = []
        for bucket in range(BUCKETS):
            mine = [
                (bucket, m.seq, m.ts_ms, m.sender, m.force, m.size)
                for m in batch
                if bucket_of(m.sender or str(m.seq), BUCKETS) == bucket
            ]
            rng.shuffle(mine)
            groups.append((bucket, [(bucket, -(bucket + 1), batch[-1].ts_ms, None, False, 0), *mine]))
        rng.shuffle(groups)
        sent = _input(groups, states, rng)
        want = list(theirs(0, iter(sent)))
        got = list(ours(0, iter(sent)))
        assert [b.schema for b in got] == [b.schema for b in want]
        assert [b.to_pylist() for b in got] == [b.to_pylist() for b in want]
        assert all(g.equals(w) for g, w in zip(got, want, strict=True))
        batches_compared += len(want)
        states = {int(k.decode()[3:]): v for k, v in _states_out(want).items()}
    assert batches_compared > 10


def test_written_for_the_pyspark_installed() -> None:
    # Another series leaves pyspark's own code in place (slower, not wrong): upgrading pyspark
    # means checking its worker protocol against this module and the test above.
    assert pyspark.__version__.startswith(stateful_arrow.PYSPARK_SERIES)


def test_a_function_without_an_arrow_form_is_left_to_pyspark() -> None:
    def plain(key: Any, frames: Any, state: Any) -> Any:
        yield from ()

    command = CloudPickleSerializer().dumps((plain, _struct(OUTPUT_SCHEMA)))
    info = UDFInfo(udfs=[memoryview(command)], args=ARG_OFFSETS, kwargs={}, result_id=0)
    assert stateful_arrow.arrow_stateful(CPickleSerializer(), [info], RunnerConf({}), EvalConf({})) is None


def test_key_and_value_offsets_as_pyspark_parses_them() -> None:
    assert stateful_arrow.key_value_offsets(ARG_OFFSETS) == ([0], [0, 1, 2, 3, 4, 5])
    assert stateful_arrow.key_value_offsets([5, 2, 0, 1, 2, 3]) == ([0, 1], [2, 3])


def test_the_environment_can_keep_pysparks_own_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyspark_worker, "read_udfs", pyspark_worker.read_udfs)  # restored after
    monkeypatch.setenv(stateful_arrow.WORKER_ENV, "pyspark")
    before = pyspark_worker.read_udfs
    assert stateful_arrow.install() is False
    assert pyspark_worker.read_udfs is before
    monkeypatch.delenv(stateful_arrow.WORKER_ENV)
    assert stateful_arrow.install() is True
    assert getattr(pyspark_worker.read_udfs, "arrow_stateful", False)


def test_input_ending_inside_a_group_is_an_error_not_rows_left_undecided() -> None:
    _, ours = _functions(10_000)
    rows = [(0, -1, 1_000_000, None, False, 0), (0, 1, 1_000_000, "node1", False, 1000)]
    columns = [pa.array(c, t) for c, t in zip(zip(*rows, strict=True), DATA_TYPES, strict=True)]
    info = {
        "properties": _properties(False),
        "keyRowAsUnsafe": b"key0",
        "object": None,
        "startOffset": 0,
        "numRows": 2,
        "isLastChunk": False,  # Spark promised more of the group, then ended the input
    }
    batch = pa.RecordBatch.from_arrays(
        [*columns, pa.array([info, None], STATE_INFO)], names=[*DECIDE_COLUMNS, "state"]
    )
    with pytest.raises(RuntimeError, match="ended inside a group"):
        list(ours(0, iter([batch])))


@pytest.mark.parametrize(
    "make",
    [
        lambda: (b"table",),  # the rules' state
        lambda: (b"a", "b", 1, 2.5, True),
        lambda: (np.float64(1.5), np.bytes_(b"x")),  # numpy's: pyspark's own update
        lambda: (x for x in [b"a"]),  # an iterator: pyspark's own update, not used up first
        lambda: [b"a"],
    ],
)
def test_the_arrow_workers_group_state_updates_as_pysparks_does(make: Any) -> None:
    """Its `update` skips pyspark's numpy and pandas look for a tuple of plain values (the
    rules' one bytes value) and leaves anything else to pyspark's own."""
    from pyspark.sql.streaming.state import GroupState

    def updated(cls: type) -> Any:
        state = cls(keyAsUnsafe=b"k", valueSchema=StructType([StructField("s", BinaryType())]),
                    optionalValue=None, batchProcessingTimeMs=0, eventTimeWatermarkMs=-1,
                    timeoutConf="NoTimeout", hasTimedOut=False, watermarkPresent=False, defined=False,
                    updated=False, removed=False, timeoutTimestamp=-1)  # fmt: skip
        state.update(make())
        return state

    ours, theirs = updated(stateful_arrow.plain_value_group_state()), updated(GroupState)
    assert ours.get == theirs.get and ours.exists and ours.json() == theirs.json()
