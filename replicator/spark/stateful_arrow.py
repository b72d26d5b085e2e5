"""The worker side of applyInPandasWithState without pandas, for the sampled query's rules.

pyspark's task worker turns each bucket's Arrow rows into pandas, and the rules' output and each
bucket's state from pandas back into Arrow: pyspark's conversions took more of the task workers'
CPU than the rules themselves in a sampled stream (py-spy over `bench.sampling_bench`). A
stateful function that carries the same rules on Arrow (`arrow_decide`: replicator.spark.sampling)
is run here on the Arrow batches as Spark sends them, and its rows and states are written back in
the layout pyspark's own code writes (tests/unit/spark/test_stateful_arrow.py compares the two
byte for byte). Any other function goes to pyspark's code.

The layout is pyspark's private protocol between its worker and FlatMapGroupsInPandasWithStateExec:
`install` checks the pyspark series it was written for and leaves pyspark's code in place on
any other, or when `STREAM_REPLICATOR_STATE_WORKER=pyspark` is in the workers' environment (to
measure one against the other, or to step around a fault found here). Spark's state store, its
checkpoint and what the JVM does are the same either way.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Imported where used: the daemon installs this in each forked worker, and pyarrow (with
    # numpy) starts threads on import, which pyspark's daemon keeps out of its fork loop.
    import pyarrow as pa

log = logging.getLogger(__name__)

# The pyspark releases whose worker protocol this module writes (checked by the unit test).
PYSPARK_SERIES = "4.3."
# The environment variable that leaves pyspark's own worker code in place (its value `pyspark`).
WORKER_ENV = "STREAM_REPLICATOR_STATE_WORKER"

ArrowDecide = Callable[[tuple[Any, ...], "pa.RecordBatch", Any, "pa.StructType"], "pa.StructArray"]
"""(grouping key, the group's value columns, its GroupState, the output's Arrow type) -> rows."""


def pysparks_worker_runs() -> bool:
    """Whether this process leaves applyInPandasWithState to pyspark's own code (with pandas):
    another pyspark series, or the environment asks for it."""
    import pyspark

    return not pyspark.__version__.startswith(PYSPARK_SERIES) or os.environ.get(WORKER_ENV) == "pyspark"


def install() -> bool:
    """Route applyInPandasWithState functions that carry `arrow_decide` through `arrow_stateful`
    in this (worker) process; False, and pyspark's code left alone, on another pyspark series."""
    import pyspark
    import pyspark.worker as worker

    if pysparks_worker_runs():
        log.debug("pyspark %s: its own applyInPandasWithState worker is used", pyspark.__version__)
        return False
    if getattr(worker.read_udfs, "arrow_stateful", False):
        return True
    pyspark_read_udfs = worker.read_udfs

    def read_udfs(
        pickle_ser: Any, udf_info_list: Any, eval_type: int, runner_conf: Any, eval_conf: Any
    ) -> Any:
        from pyspark.util import PythonEvalType

        if eval_type == PythonEvalType.SQL_GROUPED_MAP_PANDAS_UDF_WITH_STATE:
            found = arrow_stateful(pickle_ser, udf_info_list, runner_conf, eval_conf)
            if found is not None:
                from pyspark.sql.pandas.serializers import ArrowStreamSerializer

                ser = ArrowStreamSerializer(write_start_stream=True)  # as pyspark's code has it
                return found, None, ser, ser
        return pyspark_read_udfs(pickle_ser, udf_info_list, eval_type, runner_conf, eval_conf)

    read_udfs.arrow_stateful = True  # type: ignore[attr-defined]
    read_udfs.pyspark_read_udfs = pyspark_read_udfs  # type: ignore[attr-defined]
    worker.read_udfs = read_udfs
    return True


def key_value_offsets(arg_offsets: list[int]) -> tuple[list[int], list[int]]:
    """The grouping key's and the values' column offsets, from Spark's argument offsets for one
    grouped function: [length, key count, *keys, *values]."""
    length, n_keys = arg_offsets[0], arg_offsets[1]
    offsets = arg_offsets[1 : 1 + length]
    return offsets[1 : 1 + n_keys], offsets[1 + n_keys :]


def arrow_stateful(
    pickle_ser: Any, udf_info_list: Any, runner_conf: Any, eval_conf: Any
) -> Callable[[int, Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None:
    """The task's function over Spark's Arrow batches, or None when its stateful function has
    no Arrow form (or is profiled): pyspark's own code then runs it."""
    from pyspark.worker_util import read_command

    if len(udf_info_list) != 1 or len(udf_info_list[0].udfs) != 1 or runner_conf.udf_profiler:
        return None
    f, return_type = read_command(pickle_ser, udf_info_list[0].udfs[0])
    decide: ArrowDecide | None = getattr(f, "arrow_decide", None)
    if decide is None:
        return None
    key_offsets, value_offsets = key_value_offsets(list(udf_info_list[0].args))
    return _stateful_function(
        decide,
        key_offsets,
        value_offsets,
        eval_conf.state_value_schema,
        return_type,
        runner_conf.arrow_max_records_per_batch,
    )


def plain_value_group_state() -> type:
    """pyspark's GroupState, whose `update` of plain Python values (the rules' state is one
    bytes value) skips pyspark's look for numpy and pandas values: that look imports
    `pyspark.testing.utils`, which imports pandas (~47 MB a worker, and none is needed here:
    replicator.spark.arrow_without_pandas). Any other value (not a tuple of plain values: None,
    numpy's, an iterator, which the check would use up) goes to pyspark's own `update`."""
    from pyspark.sql.streaming.state import GroupState
    from pyspark.sql.types import Row

    class PlainValueGroupState(GroupState):
        def update(self, newValue: tuple[Any, ...]) -> None:
            if type(newValue) is not tuple or not all(
                type(v) in (bytes, str, int, float, bool) for v in newValue
            ):
                super().update(newValue)
                return
            # As pyspark's update sets them (pyspark/sql/streaming/state.py, 4.3).
            self._value = Row(*newValue)
            self._defined = True
            self._updated = True
            self._removed = False

    return PlainValueGroupState


def _stateful_function(
    decide: ArrowDecide,
    key_offsets: list[int],
    value_offsets: list[int],
    state_schema: Any,
    return_type: Any,
    max_records: int,
) -> Callable[[int, Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    import pyarrow as pa
    from pyspark.serializers import CPickleSerializer
    from pyspark.sql.pandas.types import to_arrow_type

    pickle_ser = CPickleSerializer()
    GroupState = plain_value_group_state()
    out_type = to_arrow_type(return_type)
    count_type = pa.struct([("dataCount", pa.int32()), ("stateCount", pa.int32())])
    state_type = pa.struct(
        [
            ("properties", pa.string()),
            ("keyRowAsUnsafe", pa.binary()),
            ("object", pa.binary()),
            ("oldTimeoutTimestamp", pa.int64()),
        ]
    )
    max_records = max_records if max_records > 0 else 2**31 - 1

    def group_state(info: dict[str, Any]) -> Any:
        properties = json.loads(info["properties"])
        properties["optionalValue"] = pickle_ser.loads(info["object"]) if info["object"] else None
        return GroupState(keyAsUnsafe=info["keyRowAsUnsafe"], valueSchema=state_schema, **properties)

    def state_row(state: Any) -> tuple[str, bytes, bytes | None, int]:
        value = pickle_ser.dumps(state._value_schema.toInternal(state._value)) if state.exists else None
        return state.json(), state._keyAsUnsafe, value, state.oldTimeoutTimestamp

    def padded(arrays: list[pa.Array], n: int, rows: int, of: pa.StructType) -> pa.Array:
        # pyspark pads the shorter of the rows and states with rows of nulls: Spark reads the counts.
        pad = pa.StructArray.from_arrays([pa.nulls(rows - n, f.type) for f in of], fields=list(of))
        return pa.concat_arrays([*arrays, pad]) if arrays else pad

    def record_batch(
        data: list[pa.StructArray], n_data: int, states: list[tuple[Any, ...]]
    ) -> pa.RecordBatch:
        rows = max(1, n_data, len(states))
        counts = pa.StructArray.from_arrays(
            [pa.array([n_data] * rows, pa.int32()), pa.array([len(states)] * rows, pa.int32())],
            fields=list(count_type),
        )
        state_arrays = pa.StructArray.from_arrays(
            [pa.array([s[i] for s in states], f.type) for i, f in enumerate(state_type)],
            fields=list(state_type),
        )
        return pa.RecordBatch.from_arrays(
            [
                counts,
                padded(data, n_data, rows, out_type),
                padded([state_arrays], len(states), rows, state_type),
            ],
            names=["_0", "_1", "_2"],
        )

    def func(split_index: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        data: list[pa.StructArray] = []
        states: list[tuple[Any, ...]] = []
        n_data = 0
        # A group's rows can come in chunks, across Spark's batches: its state comes with the first.
        state: Any = None
        chunks: list[pa.RecordBatch] = []
        for batch in batches:
            n = batch.num_columns
            columns = pa.RecordBatch.from_arrays(
                batch.columns[: n - 1], schema=pa.schema(list(batch.schema)[: n - 1])
            )
            for info in batch.column(n - 1).to_pylist():
                if not info:
                    break  # the batch's padding: no more groups in it
                if state is None:
                    state = group_state(info)
                chunks.append(columns.slice(info["startOffset"], info["numRows"]))
                if not info["isLastChunk"]:
                    continue
                rows = chunks[0] if len(chunks) == 1 else pa.concat_batches(chunks)
                key = tuple(rows.column(o)[0].as_py() for o in key_offsets)
                values = pa.RecordBatch.from_arrays(
                    [rows.column(o) for o in value_offsets],
                    names=[rows.schema.names[o] for o in value_offsets],
                )
                if state.hasTimedOut:
                    values = values.slice(0, 0)  # as pyspark: a timed-out group has no rows
                out = decide(key, values, state, out_type)
                # As pyspark's code: the rows count towards Arrow's batch limit, then the state
                # (after the function, which may have changed it) follows them.
                if len(out):
                    data.append(out)
                    n_data += len(out)
                    if n_data > max_records:
                        yield record_batch(data, n_data, states)
                        data, states, n_data = [], [], 0
                states.append(state_row(state))
                state, chunks = None, []
        if chunks:
            # Spark ends every group with its last chunk: rows left over would go undecided.
            raise RuntimeError(
                f"Spark's input ended inside a group ({sum(len(c) for c in chunks)} rows with no "
                "last chunk): set STREAM_REPLICATOR_STATE_WORKER=pyspark and report it"
            )
        if n_data or states:
            yield record_batch(data, n_data, states)

    return func
