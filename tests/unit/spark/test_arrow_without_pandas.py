"""A copy-only driver's pyarrow builds its batches without importing pandas, and a conversion
to pandas still works when something asks for one; so do Spark's task workers, embedded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from replicator.spark.arrow_without_pandas import WORKERS_ENV
from replicator.spark.session import UDF_PROFILER_CONF, embedded_settings
from replicator.spark.session_args import SessionArgs

CHECK = """
import sys
from replicator.spark.arrow_without_pandas import pyarrow_without_pandas
print(pyarrow_without_pandas())
from replicator.nats.readers import RawMessage
from replicator.spark.rows import to_record_batch
import pyarrow as pa
msgs = [RawMessage(subject="a.b", data=b"x" * 10, headers=[("h", "1")], seq=i, ts_ns=i * 1000) for i in (1, 2)]
table = pa.Table.from_batches([to_record_batch("S", msgs)])
print("pandas" in sys.modules, table.num_rows, table.column("seq").to_pylist())
print(list(table.to_pandas()["seq"]), "pandas" in sys.modules)
print(pyarrow_without_pandas())
"""


def test_batches_are_built_without_pandas_and_to_pandas_still_works() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:4] == ["True", "False 2 [1, 2]", "[1, 2] True", "False"], out


def test_embedded_task_workers_do_without_pandas_unless_pysparks_udf_profiler_is_on(launch_env: None) -> None:
    """Embedded, the session tells the task workers they make no pandas object (they build
    rows from NATS and run the sampled rules on Arrow); with pyspark's UDF profiler on,
    pyspark's own pandas code runs the rules, and on a cluster the executors' environment is
    not the driver's: neither is told."""

    def told(master: str, conf: dict[str, str]) -> str | None:
        embedded_settings(SessionArgs(master=master, app_name="t", conf=conf, light_jvm=False))
        return os.environ.get(WORKERS_ENV)

    assert told("local[*]", {}) == "1"
    assert told("local[*]", {UDF_PROFILER_CONF: "perf"}) is None
    assert told("local[*]", {}) == "1"
    assert told("spark://head:7077", {}) is None


# A task worker as replicator.spark.daemon prepares one, then the sampled rules' state updated
# as they update it (one bytes value) and a read task's rows built: is pandas loaded?
WORKER = """
import sys
from replicator.spark import daemon, stateful_arrow
daemon.prepare_worker()
from pyspark.sql.types import BinaryType, StructField, StructType
state = stateful_arrow.plain_value_group_state()(
    keyAsUnsafe=b"k", valueSchema=StructType([StructField("s", BinaryType())]), optionalValue=None,
    batchProcessingTimeMs=0, eventTimeWatermarkMs=-1, timeoutConf="NoTimeout", hasTimedOut=False,
    watermarkPresent=False, defined=False, updated=False, removed=False, timeoutTimestamp=-1)
state.update((b"table",))
print(state.exists, state.get[0], state._updated)
from replicator.nats.readers import RawMessage
from replicator.spark.rows import to_record_batch
batch = to_record_batch("S", [RawMessage(subject="a.b", data=b"x", headers=[], seq=1, ts_ns=1)])
print(batch.num_rows, "pandas" in sys.modules)
"""


@pytest.mark.parametrize(
    ("told", "state_worker", "pandas"), [("1", "", False), ("", "", True), ("1", "pyspark", True)]
)
def test_a_task_worker_told_so_runs_the_rules_state_and_rows_without_pandas(
    told: str, state_worker: str, pandas: bool
) -> None:
    """Not told (the profiler on, a cluster), or where pyspark's own stateful code runs the
    rules (STREAM_REPLICATOR_STATE_WORKER=pyspark), pyarrow loads pandas as before."""
    env = {**os.environ, WORKERS_ENV: told, "STREAM_REPLICATOR_STATE_WORKER": state_worker}
    out = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split("\n")[:2] == ["True b'table' True", f"1 {pandas}"], out
