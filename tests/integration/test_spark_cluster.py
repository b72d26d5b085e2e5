"""Cluster mode, proven: the same job on a Spark standalone master + worker started from the
pyspark package on this machine."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from helpers import (
    copied_source_sequences,
    create_stream,
    publish,
    registration,
    run,
    start_replicator,
    wait_for,
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


def test_runs_on_a_spark_standalone_cluster(
    spark_standalone: str, source_server, nats_server, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "CL", ["cl.>"]))
    run(publish(src, [(f"cl.{i % 5}", registration(i), None) for i in range(5_000)]))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [{"stream": "CL", "source_url": src, "target_url": dst}],
        spark_conf={"spark.driver.host": "127.0.0.1", "spark.cores.max": "2"},
    )
    rep = start_replicator(cfg, "--spark-master", spark_standalone)
    try:
        wait_for(lambda: run(count(dst, "CL")) >= 5_000, 240, "copy on the cluster", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "CL") == list(range(1, 5_001))
    # The read tasks really ran on the standalone worker's executor, not in a local driver.
    app_dirs = list((tmp_path / "work").glob("app-*/*/stderr"))
    assert app_dirs, "no executor was launched by the standalone worker"


def test_subject_lanes_are_published_by_the_standalone_workers_executor(
    spark_standalone: str, source_server, nats_server, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "LN", ["ln.>"]))
    run(publish(src, [(f"ln.{i % 7}", registration(i), None) for i in range(5_000)]))
    stream = {"stream": "LN", "source_url": src, "target_url": dst, "order": "subject", "lanes": 2}
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [stream],
        spark_conf={"spark.driver.host": "127.0.0.1", "spark.cores.max": "2"},
    )
    rep = start_replicator(cfg, "--spark-master", spark_standalone)
    try:
        wait_for(lambda: run(count(dst, "LN")) >= 5_000, 240, "lanes on the cluster", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    copies = run(read_all(dst, "LN"))
    by_subject: dict[str, list[int]] = {}
    for m in copies:
        mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
        assert mark is not None
        by_subject.setdefault(m.subject, []).append(mark.sequence)
    assert by_subject == {f"ln.{k}": list(range(k + 1, 5_001, 7)) for k in range(7)}
    # On a cluster a task runs only in an executor: the worker's ran the lanes' tasks.
    stderr = "".join(p.read_text(errors="replace") for p in (tmp_path / "work").glob("app-*/*/stderr"))
    assert stderr, "no executor was launched by the standalone worker"
