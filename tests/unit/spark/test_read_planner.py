"""Spark's read planner step runs without pyarrow (replicator.spark.read_planner), and the read
function it sends to the tasks is pyspark's own: a task reads with it as before."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from helpers import start_without_the_jvm
from pyspark.serializers import CPickleSerializer, read_int
from pyspark.sql.datasource import InputPartition

from replicator.spark.read_planner import READ_PLANNER

# A stream reader and its planning, as the planner process runs it (pyspark's own
# `write_read_func_and_partitions`), in a fresh interpreter: the planner's code from
# read_planner_code(), with the stand-in for pyarrow in place. The reader is defined here, so
# it goes to the task by value, as a user's would.
_PLAN = """
import io, sys, types
from replicator.spark.read_planner import pyarrow_stand_in, read_planner_code
sys.modules["pyarrow"] = pyarrow_stand_in()
code, spec = read_planner_code()
planner = types.ModuleType("planner")  # not registered: its functions go by value, as __main__'s
exec(code, planner.__dict__)
from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

class Reader(DataSourceStreamReader):
    def read(self, partition):
        if partition.value == "arrow":  # as the replicator's reader gives its rows
            import pyarrow as pa
            return iter([pa.RecordBatch.from_pydict({"n": [7], "data": [b"y"]})])
        return iter((n, b"x" * n) for n in range(partition.value))

class Source(DataSource):
    pass

schema = StructType([StructField("n", LongType()), StructField("data", BinaryType())])
out = io.BytesIO()
planner.write_read_func_and_partitions(out, reader=Reader(), data_source=Source({}), schema=schema,
                                       max_arrow_batch_size=2, binary_as_bytes=True)
sys.stdout.buffer.write(out.getvalue())
sys.stderr.write(f"pyarrow.lib loaded: {'pyarrow.lib' in sys.modules}")
"""


def test_the_planner_sends_pysparks_read_function_without_loading_pyarrow() -> None:
    done = subprocess.run([sys.executable, "-c", _PLAN], capture_output=True, check=True)
    assert done.stderr.decode().endswith("pyarrow.lib loaded: False"), done.stderr.decode()
    # What the JVM gets: the command (the read function and its type), then no partitions (a
    # stream reader's are planned per batch).
    out = io.BytesIO(done.stdout)
    read_func, return_type = CPickleSerializer()._read_with_length(out)
    assert read_func.__module__ == READ_PLANNER and read_int(out) == 0
    assert [f.name for f in return_type.fields] == ["n", "data"]
    # The stand-in went by reference, as the real module would: the task's is pyarrow itself.
    assert read_func.__globals__["records_to_arrow_batches"].__globals__["pa"] is pa

    def task(value: object) -> list[pa.RecordBatch]:  # its partition: one row, one binary column
        partition = CPickleSerializer().dumps(InputPartition(value))
        return list(read_func(iter([pa.RecordBatch.from_pydict({"partition": [partition]})])))

    batches = task(5)
    table = pa.Table.from_batches(batches)
    assert [b.num_rows for b in batches] == [2, 2, 1]  # max_arrow_batch_size
    assert table.column("n").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("data").to_pylist() == [b"x" * n for n in range(5)]
    # A reader that gives Arrow record batches (the replicator's) has them passed on.
    assert pa.Table.from_batches(task("arrow")).to_pylist() == [{"n": 7, "data": b"y"}]


def test_the_workers_script_starts_sparks_read_planner_through_it(tmp_path: Path) -> None:
    """Without the JVM's port the step stops at once, as it connects back; its traceback shows
    how it was started, and the imports it made before (-X importtime) hold no pyarrow."""
    done = start_without_the_jvm(tmp_path, READ_PLANNER, {"PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode != 0
    assert "replicator/spark/read_planner.py" in done.stderr, done.stderr
    assert "plan_data_source_read.py" in done.stderr, done.stderr
    assert "get_sock_file_to_executor" in done.stderr, done.stderr
    imported = [
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    ]
    assert "pyspark.sql.worker.utils" in imported, imported[-20:]  # the planner's own imports ran
    assert not [m for m in imported if m.split(".")[0] in ("pyarrow", "numpy", "pandas")], imported


def test_the_module_says_how_it_is_run_when_not_given_the_planner() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "replicator.spark.read_planner"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert f"usage: python -m replicator.spark.read_planner {READ_PLANNER}" in done.stderr, done.stderr
