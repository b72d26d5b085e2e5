"""Cluster mode, proven: the same job on a Spark standalone master + worker started from the
pyspark package on this machine, with live copies where the config asks for them."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from helpers import (
    SLOW_S,
    copied_source_sequences,
    create_stream,
    publish,
    registration,
    run,
    start_replicator,
    wait_for,
    wait_handled,
    write_config,
)

from harness.spark_cluster import standalone_cluster
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.wire import first_value

pytestmark = pytest.mark.integration

SPARK_HOME = Path(pyspark.__file__).parent


@pytest.fixture
def spark_standalone(tmp_path: Path) -> Iterator[str]:
    with standalone_cluster(SPARK_HOME, tmp_path, dict(os.environ, PYSPARK_PYTHON=sys.executable)) as url:
        yield url


def _copy_on_the_cluster(master: str, src: str, dst: str, tmp_path: Path, stream: str, subjects: int,
                         **entry: object) -> None:  # fmt: skip
    """5,000 messages over `subjects` subjects copied by a replicator whose Spark is `master`;
    afterwards, an executor of the standalone worker must have run (a task runs nowhere else)."""
    run(create_stream(src, stream, [f"{stream.lower()}.>"]))
    run(publish(src, [(f"{stream.lower()}.{i % subjects}", registration(i), None) for i in range(5_000)]))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [{"stream": stream, "source_url": src, "target_url": dst, **entry}],
        spark_conf={"spark.driver.host": "127.0.0.1", "spark.cores.max": "2"},
    )
    rep = start_replicator(cfg, "--spark-master", master)
    try:
        wait_for(lambda: run(count(dst, stream)) >= 5_000, SLOW_S, "copy on the cluster", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    assert list((tmp_path / "work").glob("app-*/*/stderr")), (
        "no executor was launched by the standalone worker"
    )


def test_runs_on_a_spark_standalone_cluster(
    spark_standalone: str, source_server, nats_server, tmp_path: Path
) -> None:
    # Batches above 1,000 messages are read by the worker's executor (driver_reads: auto). Not
    # copied ahead: the driver could copy the whole backlog while the session starts, and stop
    # before the worker launched an executor (it did once in CI).
    _copy_on_the_cluster(
        spark_standalone, source_server.url, nats_server.url, tmp_path, "CL", 5, copy_ahead=False
    )
    assert copied_source_sequences(nats_server.url, "CL") == list(range(1, 5_001))


def test_subject_lanes_are_published_by_the_standalone_workers_executor(
    spark_standalone: str, source_server, nats_server, tmp_path: Path
) -> None:
    dst = nats_server.url
    _copy_on_the_cluster(
        spark_standalone, source_server.url, dst, tmp_path, "LN", 7, order="subject", lanes=2
    )
    by_subject: dict[str, list[int]] = {}
    for m in run(read_all(dst, "LN")):
        mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
        assert mark is not None
        by_subject.setdefault(m.subject, []).append(mark.sequence)
    assert by_subject == {f"ln.{k}": list(range(k + 1, 5_001, 7)) for k in range(7)}


def test_copy_live_on_a_cluster_copies_each_message_once_in_order(
    spark_standalone: str, source_server, nats_server, tmp_path: Path
) -> None:
    """On a cluster, live copies run only when asked (copy_live: true): the driver copies as the
    source stores each message while the query's batches read only what the target lacks (on the
    worker's executor when above 1,000 messages; not asserted: the live copies may keep up).
    Together they must copy each message once, in order."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "LV", ["lv.>"]))
    run(publish(src, [(f"lv.{i % 5}", registration(i), None) for i in range(5_000)]))
    entry = {
        "stream": "LV",
        "source_url": src,
        "target_url": dst,
        "copy_live": True,
        "batch_max_messages": 2_000,
    }
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [entry],
                       spark_conf={"spark.driver.host": "127.0.0.1", "spark.cores.max": "2"})  # fmt: skip
    rep = start_replicator(cfg, "--spark-master", spark_standalone)
    try:
        rep.wait_ready(SLOW_S)
        wait_for(lambda: "copying new messages live" in rep.output(10**9), SLOW_S, "copying live", rep)
        # Bursts above what the driver reads itself (driver_reads: auto, 1,000 on a cluster), so
        # that a batch can be read on the executor while the live copies publish.
        for burst in range(4):
            first = 5_000 + burst * 5_000
            run(publish(src, [(f"lv.{i % 5}", registration(i), None) for i in range(first, first + 5_000)]))
        wait_for(lambda: run(count(dst, "LV")) >= 25_000, SLOW_S, "the bursts copied", rep)
        wait_handled(rep, src, "LV")
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "LV") == list(range(1, 25_001)), "each once, in order"
    log = rep.output(10**9)
    assert "Traceback" not in log and "live copies stopped" not in log, log
