"""Cluster mode, proven: the same job on a Spark standalone master + worker started from the
pyspark package on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from helpers import (
    create_stream,
    publish,
    registration,
    run,
    start_replicator,
    wait_for,
    write_config,
)

from harness.localnats import free_port
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.wire import first_value

pytestmark = pytest.mark.integration

SPARK_HOME = Path(pyspark.__file__).parent


def _spark_class(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen(
        [str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT, env=env
    )


@pytest.fixture
def spark_standalone(tmp_path: Path) -> Iterator[str]:
    env = dict(
        os.environ,
        SPARK_HOME=str(SPARK_HOME),
        PYSPARK_PYTHON=sys.executable,
        SPARK_WORKER_DIR=str(tmp_path / "work"),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    master = _spark_class(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
        ],
        tmp_path / "master.log",
        env,
    )
    worker = _spark_class(
        [
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            "2",
            "--memory",
            "1G",
            "--webui-port",
            str(free_port()),
            master_url,
        ],
        tmp_path / "worker.log",
        env,
    )
    try:
        deadline = time.monotonic() + 90
        while "Registering worker" not in (tmp_path / "master.log").read_text(errors="replace"):
            if time.monotonic() > deadline or master.poll() is not None or worker.poll() is not None:
                raise RuntimeError(
                    "Spark standalone did not start:\n" + (tmp_path / "master.log").read_text()
                )
            time.sleep(0.5)
        yield master_url
    finally:
        for p in (worker, master):
            p.terminate()
        for p in (worker, master):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


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
    got = [
        parse_source_header(first_value(m.headers, SOURCE_HEADER)).sequence for m in run(read_all(dst, "CL"))
    ]  # type: ignore[union-attr]
    assert got == list(range(1, 5_001))
    # The read tasks really ran on the standalone worker's executor, not in a local driver.
    app_dirs = list((tmp_path / "work").glob("app-*/*/stderr"))
    assert app_dirs, "no executor was launched by the standalone worker"
