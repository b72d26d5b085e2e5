"""Spark's streaming source runner starts without pyarrow (replicator.spark.source_runner), and
the read planner's module is still there, whole, for anything that uses it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import start_without_the_jvm

from replicator.spark.source_runner import RUNNER


def _python(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.split()


def test_the_runner_imports_without_pyarrow_and_the_read_planner_loads_when_used() -> None:
    out = _python(
        """
import importlib, sys
from replicator.spark.source_runner import READ_PLANNER, RUNNER, read_planner_stand_in
importlib.import_module("pyspark.sql.worker")
sys.modules[READ_PLANNER] = read_planner_stand_in()
importlib.import_module(RUNNER)
print("pyarrow" in sys.modules, "numpy" in sys.modules)
from pyspark.sql.types import LongType, StructField, StructType
from pyspark.sql.streaming import python_streaming_source_runner as runner
schema = StructType([StructField("n", LongType())])
batches = list(runner.records_to_arrow_batches(iter([(1,), (2,)]), 10, schema, None))
print("pyarrow" in sys.modules, sum(b.num_rows for b in batches), batches[0].column(0).to_pylist())
# Any other name a later runner may import from it comes from the real module.
print(sys.modules[READ_PLANNER].write_read_func_and_partitions.__module__)
"""
    )
    assert out == ["False", "False", "True", "2", "[1,", "2]", "pyspark.sql.worker.plan_data_source_read"]


def test_the_workers_script_starts_sparks_runner_through_it(tmp_path: Path) -> None:
    """Without the JVM's port the runner stops at once; its traceback shows how it was started."""
    done = start_without_the_jvm(tmp_path, RUNNER)
    assert done.returncode != 0
    assert "replicator/spark/source_runner.py" in done.stderr, done.stderr
    assert "python_streaming_source_runner.py" in done.stderr, done.stderr
