"""A Spark standalone cluster (one master, one or more workers) on loopback, started from a
pyspark installation's own scripts: the cluster mode users deploy, on this machine (the tests
and `make bench`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.localnats import free_port


@dataclass(frozen=True)
class Place:
    """Where a process of the cluster runs: its address, and the command prefix that puts it
    on its host (`ip netns exec NS` for a host of harness.netns; none on this one)."""

    address: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()


def _spark_class(
    spark_home: Path, args: list[str], log: Path, env: dict[str, str], place: Place
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [*place.prefix, str(spark_home / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env, SPARK_LOCAL_IP=place.address),
        )


@contextlib.contextmanager
def standalone_cluster(
    spark_home: Path,
    workdir: Path,
    env: dict[str, str] | None = None,
    cores: int = 2,
    workers: int = 1,
    places: list[Place] | None = None,
) -> Iterator[str]:
    """Yields the master URL once every worker registered; worker i's application directories
    are under workdir/work (the first) or workdir/work-<i>. `places`: the master's, then each
    worker's (all on this host's loopback by default)."""
    env = dict(
        os.environ if env is None else env,
        SPARK_HOME=str(spark_home),
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    places = places or [Place()] * (workers + 1)
    if len(places) != workers + 1:
        raise ValueError(f"standalone_cluster: {len(places)} places for a master and {workers} workers")
    port = free_port()
    master_url = f"spark://{places[0].address}:{port}"
    master_log = workdir / "master.log"
    master = _spark_class(
        spark_home,
        ["org.apache.spark.deploy.master.Master", "--host", places[0].address, "--port", str(port),
         "--webui-port", str(free_port())],
        master_log,
        env,
        places[0],
    )  # fmt: skip
    started = [master]
    try:
        for i in range(workers):
            work = workdir / ("work" if i == 0 else f"work-{i}")
            args = ["org.apache.spark.deploy.worker.Worker", "--host", places[i + 1].address, "--cores",
                    str(cores), "--memory", "1G", "--webui-port", str(free_port()), "--work-dir", str(work),
                    master_url]  # fmt: skip
            log = workdir / ("worker.log" if i == 0 else f"worker-{i}.log")
            started.append(_spark_class(spark_home, args, log, env, places[i + 1]))
        deadline = time.monotonic() + 90
        while master_log.read_text(errors="replace").count("Registering worker") < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                raise RuntimeError("Spark standalone did not start:\n" + master_log.read_text())
            time.sleep(0.5)
        yield master_url
    finally:
        for p in reversed(started):
            p.terminate()
        for p in reversed(started):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
