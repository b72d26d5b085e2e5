"""A Spark standalone cluster (one master, one worker) on loopback, started from a pyspark
installation's own scripts: the cluster mode users deploy, on this machine."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from harness.localnats import free_port


def _spark_class(
    spark_home: Path, args: list[str], log: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_home / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )


@contextlib.contextmanager
def standalone_cluster(
    spark_home: Path, workdir: Path, env: dict[str, str] | None = None, cores: int = 2
) -> Iterator[str]:
    """Yields the master URL; the worker's application directories are under workdir/work."""
    env = dict(
        os.environ if env is None else env,
        SPARK_HOME=str(spark_home),
        SPARK_WORKER_DIR=str(workdir / "work"),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    master_log = workdir / "master.log"
    master = _spark_class(
        spark_home,
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(free_port())],
        master_log,
        env,
    )  # fmt: skip
    worker = _spark_class(
        spark_home,
        ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(cores),
         "--memory", "1G", "--webui-port", str(free_port()), master_url],
        workdir / "worker.log",
        env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while "Registering worker" not in master_log.read_text(errors="replace"):
            if time.monotonic() > deadline or master.poll() is not None or worker.poll() is not None:
                raise RuntimeError("Spark standalone did not start:\n" + master_log.read_text())
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
