"""The artifacts of `make dist`, used as a user would, outside this checkout: the wheel
installed into a new venv runs `--version`, `validate` and a real copy; the packed environment
and the submit file run the same copy through `spark-submit` on a Spark standalone cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SLOW_S, copied_source_sequences, orders_backlog, run, wait_for, wait_handled

from harness.dist import SUBMIT_FILE, Artifacts, build
from harness.process import ReplicatorProcess, process_tree
from harness.spark_cluster import standalone_cluster
from harness.streams import count_messages as count

pytestmark = pytest.mark.integration

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Artifacts]:
    yield build(tmp_path_factory.mktemp("dist"))


def user_env(venv: Path) -> dict[str, str]:
    """A shell with the new venv on PATH and nothing of this checkout or its venv."""
    drop = {"PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "SPARK_HOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return env


def driver_pid(root: int) -> int:
    """The Python driver spark-submit started: the descendant of `root` running the submit file."""
    found = [pid for pid, cmd in process_tree(root).items() if pid != root and SUBMIT_FILE.encode() in cmd]
    assert found, "no Python driver under spark-submit"
    return found[0]


def in_venv(venv: Path, *cmd: str, cwd: Path) -> str:
    done = subprocess.run(
        [str(venv / "bin" / cmd[0]), *cmd[1:]], capture_output=True, text=True, env=user_env(venv), cwd=cwd,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_wheel_in_a_new_venv_validates_and_copies(
    artifacts: Artifacts, source_server, nats_server, tmp_path: Path
) -> None:
    venv = artifacts.venv
    where = in_venv(
        venv, "python", "-c", "import replicator, emulator; print(replicator.__file__)", cwd=tmp_path
    )
    assert where.startswith(str(venv)) and not where.startswith(str(CHECKOUT))
    assert in_venv(venv, "stream-replicator", "--version", cwd=tmp_path).startswith("stream-replicator 0.")
    cfg, n = orders_backlog(source_server.url, nats_server.url, tmp_path, 2_000, batch_max_messages=500)
    assert "ORDERS/dc1" not in in_venv(
        venv, "stream-replicator", "validate", "--config", str(cfg), cwd=tmp_path
    )
    assert in_venv(venv, "stream-replicator", "validate", "--config", str(cfg), cwd=tmp_path).endswith(
        ": ok (1 stream)\n"
    )

    rep = ReplicatorProcess(
        cfg, tmp_path / "replicator.log", env=user_env(venv), cwd=tmp_path,
        command=[str(venv / "bin" / "stream-replicator"), "run"],
    )  # fmt: skip
    started = time.monotonic()
    rep.start(wait=False)
    try:
        wait_for(lambda: run(count(nats_server.url, "ORDERS")) >= 1, SLOW_S, "the first copy", rep)
        first = time.monotonic() - started
        wait_for(lambda: run(count(nats_server.url, "ORDERS")) >= n, SLOW_S, "the copy", rep)
        print(
            f"wheel: pip install {artifacts.seconds['install']:.0f} s, first copy {first:.1f} s after start"
        )
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(nats_server.url, "ORDERS") == list(range(1, n + 1))


# Minutes of a standalone master, worker and executor in the packed environment: make test-long.
@pytest.mark.long
def test_spark_submit_with_the_packed_environment_on_a_standalone_cluster(
    artifacts: Artifacts, source_server, nats_server, tmp_path: Path
) -> None:
    venv = artifacts.venv
    spark_home = Path(
        in_venv(venv, "python", "-c", "import pyspark; print(pyspark.__path__[0])", cwd=tmp_path).strip()
    )
    # Batches over the driver's read limit on a cluster (1,000), so Spark's read tasks run on the
    # executor, in the packed environment's Python.
    cfg, n = orders_backlog(source_server.url, nats_server.url, tmp_path, 4_500, batch_max_messages=1_500)
    env = user_env(venv)
    with standalone_cluster(spark_home, tmp_path, env, cores=1) as master:
        submit = [
            str(venv / "bin" / "spark-submit"),
            "--master", master,
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.cores.max=1",
            "--conf", "spark.executor.memory=768m",
            "--archives", f"{artifacts.env_archive}#environment",
            "--conf", "spark.pyspark.python=./environment/bin/python",
            "--conf", f"spark.pyspark.driver.python={venv / 'bin' / 'python'}",
            str(artifacts.submit_file),
        ]  # fmt: skip
        rep = ReplicatorProcess(cfg, tmp_path / "submit.log", env=env, cwd=tmp_path, command=submit)
        rep.start(wait=False)
        try:
            wait_for(
                lambda: run(count(nats_server.url, "ORDERS")) >= n, SLOW_S, "the copy via spark-submit", rep
            )
            # Stopped once its last batch is settled: a stop mid-batch is test_stop's; here, on a
            # loaded CI machine, finishing that batch plus the standalone cluster's own stop
            # once passed the stop deadline.
            wait_handled(rep, source_server.url, "ORDERS")
            # A clean stop under spark-submit: SIGTERM to the Python driver (docs/operations.md);
            # it stops the query and Spark, and spark-submit then ends with its exit code, 0.
            assert rep.proc is not None
            os.kill(driver_pid(rep.proc.pid), signal.SIGTERM)
            assert rep.proc.wait(90) == 0, rep.output()
            assert "stop requested" in rep.output()
        finally:
            rep.stop()
    assert copied_source_sequences(nats_server.url, "ORDERS") == list(range(1, n + 1)), rep.output()
    # The executor ran on the standalone worker, with the packed environment unpacked beside it.
    executors = list((tmp_path / "work").glob("app-*/*"))
    assert executors, "no executor was launched by the standalone worker"
    assert any((e / "environment" / "bin" / "python").exists() for e in executors), executors
