"""Canaries for replicator.spark.internals: each use of Spark's private surface, called on a real
session. A pyspark that drops or changes one fails here, by name, instead of the replicator
quietly taking that function's fallback in production (docs/design.md, "Upgrading pyspark")."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import create_stream, publish_raw, run
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from replicator.options import ReaderOptions
from replicator.runner import _first_line
from replicator.spark import internals
from replicator.spark.checkpoint import open_checkpoint
from replicator.spark.listener import listen_to_batches
from replicator.spark.planners import PLANNER_MODULE_PREFIX, planners_left, release_idle_planners
from replicator.spark.small_batches import batch_offsets

pytestmark = pytest.mark.integration
# Spark's Python workers cannot import this test module: its data source goes to them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _CountingReader(DataSourceStreamReader):
    """Ten rows, with offsets shaped as the NATS source's ("seq" and where the batch starts)."""

    def initialOffset(self) -> dict:
        return {"seq": 1, "from": 1}

    def latestOffset(self) -> dict:
        return {"seq": 11, "from": 1}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [InputPartition((start["seq"], end["seq"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        first, end = partition.value  # type: ignore[attr-defined]
        for seq in range(first, end):
            yield (seq,)

    def commit(self, end: dict) -> None:
        pass


class _CountingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "canary_counting"

    def schema(self) -> str:
        return "seq long"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _CountingReader()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from replicator.spark.session import build_session

    s = build_session("local[1]", "internals-canary")
    s.dataSource.register(_CountingSource)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def one_query(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A streaming query on a Python data source, run to its end, with every batch's progress."""
    heard: list[dict[str, Any]] = []
    progressed = threading.Event()

    def on_progress(p: dict[str, Any]) -> None:
        heard.append(p)
        progressed.set()

    assert listen_to_batches(spark, on_progress), "the progress listener could not be added"
    checkpoint = tmp_path_factory.mktemp("canary-checkpoint")
    query = (
        spark.readStream.format("canary_counting").load()
        .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(120)
    assert progressed.wait(30), "no batch progress reached the listener"
    return checkpoint, heard


def test_the_jvm_is_ours_answers_and_has_the_checkpoint_file_manager_we_name(spark: Any) -> None:
    assert internals.gateway_started()
    assert internals.gateway_process() is not None, "the JVM's process is not where pyspark kept it"
    assert internals.jvm_answers(spark)
    assert internals.jvm_class_exists(spark, internals.CHECKPOINT_FILE_MANAGER), (
        internals.CHECKPOINT_FILE_MANAGER
    )
    assert (
        spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") == internals.CHECKPOINT_FILE_MANAGER
    )


def test_each_batch_progress_reaches_the_listener_as_a_whole_document(one_query: Any) -> None:
    _, heard = one_query
    assert heard[0]["batchId"] == 0
    assert heard[0]["numInputRows"] == 10
    assert "durationMs" in heard[0] and "addBatch" in heard[0]["durationMs"]


def test_the_offset_log_entry_names_the_batch_range(spark: Any, one_query: Any) -> None:
    checkpoint, _ = one_query
    files = open_checkpoint(str(checkpoint), spark)
    assert internals.offset_log_source_offset(files.read_text("offsets/0")) == {"seq": 11, "from": 1}
    assert batch_offsets(files, 0) == (1, 11, None)


def test_registering_a_data_source_starts_no_lookup_of_others(spark: Any, one_query: Any) -> None:
    """The session's JVM finds no command in PYSPARK_DRIVER_PYTHON, so Spark decides to skip its
    search for third-party Python data sources (NO_DATA_SOURCE_LOOKUP; a Spark that no longer
    decides so fails the first check, not only the second): no planner process ran it, while the
    query's own planner steps did run (the list is not empty for another reason)."""
    assert internals.data_source_lookup_skipped(spark), "Spark decided to look up Python data sources"
    modules = [d.module for d in internals.python_worker_daemons(spark)]
    assert "pyspark.sql.worker.create_data_source" in modules, modules
    assert "pyspark.sql.worker.lookup_data_sources" not in modules, "Spark looked up Python data sources"


def test_the_planner_processes_are_found_and_released(spark: Any, one_query: Any) -> None:
    daemons = internals.python_worker_daemons(spark)
    planners = [d.module for d in daemons if d.module.startswith(PLANNER_MODULE_PREFIX)]
    assert planners, f"no planner daemons among {[d.module for d in daemons]}"
    assert planners_left(spark)
    released = release_idle_planners(spark)
    assert released and set(released) <= set(planners)
    assert not any(d.idle for d in internals.python_worker_daemons(spark) if d.module in released)
    assert not planners_left(spark)  # the runner stops looking once this is so


def test_a_checkpoint_on_a_hadoop_uri_is_read_and_written_through_the_jvm(spark: Any, tmp_path: Path) -> None:
    files = open_checkpoint(f"file://{tmp_path}/ckpt", spark)
    assert type(files).__name__ == "HadoopCheckpoint"
    assert files.read_text("inflight") is None
    files.write_text("inflight", "é 1\n")
    assert files.read_text("inflight") == "é 1\n"
    assert (tmp_path / "ckpt" / "inflight").read_text() == "é 1\n"
    assert "inflight" in files.names("")
    assert files.exists("inflight")
    files.delete("inflight")
    assert not files.exists("inflight")


def test_a_failure_inside_spark_keeps_its_message_and_cause(spark: Any) -> None:
    with pytest.raises(Exception) as failed:
        spark.sql("select raise_error('canary reason')").collect()
    e = failed.value
    assert isinstance(getattr(e, "_desc", None), str), "captured exceptions no longer keep _desc"
    assert isinstance(getattr(e, "_stackTrace", None), str), "captured exceptions no longer keep _stackTrace"
    assert any("canary reason" in t for t in internals.captured_error_texts(e))
    assert "canary reason" in _first_line(e)


def test_numpy_values_still_reach_the_jvm_after_the_check_that_skips_pandas(spark: Any) -> None:
    import numpy as np

    assert internals.numpy_check_without_pandas(), "pyspark's numpy converters moved"
    jvm = spark.sparkContext._jvm
    assert jvm.java.lang.Math.abs(np.int64(-5)) == 5
    assert jvm.java.util.Arrays.toString(np.array([1, 2, 3], dtype=np.int64)) == "[1, 2, 3]"


def test_starting_a_session_does_not_load_pandas() -> None:
    script = (
        "import sys\n"
        "from replicator.spark.session import build_session\n"
        "spark = build_session('local[1]', 'no-pandas')\n"
        "spark.range(3).collect()\n"
        "print('pandas loaded' if 'pandas' in sys.modules else 'no pandas')\n"
        "spark.stop()\n"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "no pandas"


def test_a_session_whose_plans_never_run_compiles_no_code(spark: Any, tmp_path: Path) -> None:
    """NO_CODEGEN_CONF (a copy-only process whose driver reads every batch): preparing a
    streaming batch's DataFrame for foreachBatch compiles nothing, where by default it does."""

    def compiled_by_a_batch(expression: str, name: str) -> int:
        counts: list[int] = []
        ran = threading.Event()
        before = internals.codegen_compilations(spark)

        def sink(df: Any, batch_id: int) -> None:
            counts.append(internals.codegen_compilations(spark) - before)  # the DataFrame is ready
            ran.set()

        query = (
            spark.readStream.format("canary_counting").load().selectExpr(expression)
            .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / name)).start()
        )  # fmt: skip
        try:
            assert ran.wait(120), f"no batch ran: {query.exception()}"
        finally:
            query.stop()
        return counts[0]

    for key, value in internals.NO_CODEGEN_CONF.items():
        spark.conf.set(key, value)
    try:
        assert compiled_by_a_batch("seq * 7919 + 3 AS x", "without") == 0
    finally:
        for key in internals.NO_CODEGEN_CONF:
            spark.conf.unset(key)
    assert compiled_by_a_batch("seq * 7919 + 4 AS x", "with") > 0, (
        "codegen metrics no longer count compilations"
    )


def test_rows_spark_reads_without_generated_code_are_the_rows_it_reads_with_it(
    spark: Any, nats_server: Any, tmp_path: Path
) -> None:
    """Under NO_CODEGEN_CONF a copy batch the driver could not read goes through Spark, evaluated
    without generated code: its rows (a header name repeated, in order; empty and binary
    payloads) are exactly those Spark gives with generated code."""
    url = nats_server.url
    run(create_stream(url, "RAW", ["raw.>"]))
    items = [
        ("raw.a", b"", [("X-Dup", "1"), ("X-Dup", "2"), ("X-Empty", "")]),
        ("raw.b", bytes(range(256)), []),
        ("raw.c", b"x" * 5000, [("Nats-Msg-Id", "m3")]),
    ]
    run(publish_raw(url, items))

    def read(name: str) -> pa.Table:
        tables: list[pa.Table] = []
        query = (
            spark.readStream.format("nats-jetstream").options(**ReaderOptions(url=url, stream="RAW").to_spark())
            .load().writeStream.foreachBatch(lambda df, _: tables.append(df.toArrow()))
            .option("checkpointLocation", str(tmp_path / name)).trigger(availableNow=True).start()
        )  # fmt: skip
        assert query.awaitTermination(120), "the read did not end"
        return pa.concat_tables(tables)

    with_code = read("with")
    for key, value in internals.NO_CODEGEN_CONF.items():
        spark.conf.set(key, value)
    try:
        before = internals.codegen_compilations(spark)
        without = read("without")
        assert internals.codegen_compilations(spark) == before
    finally:
        for key in internals.NO_CODEGEN_CONF:
            spark.conf.unset(key)
    assert without.equals(with_code)
    assert without.column("data").to_pylist() == [data for _, data, _ in items]
    assert without.column("headers").to_pylist()[0] == [("X-Dup", "1"), ("X-Dup", "2"), ("X-Empty", "")]
