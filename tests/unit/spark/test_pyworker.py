"""Spark's Python workers import the installed (compiled) pyspark, not its zip; everything
else on PYTHONPATH stays."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replicator.spark.pyworker import worker_python


def test_the_worker_command_drops_pysparks_zips_and_keeps_the_rest(tmp_path: Path) -> None:
    command = worker_python(sys.executable, tmp_path)
    assert command != sys.executable and os.access(command, os.X_OK)
    assert worker_python(sys.executable, tmp_path) == command  # one file per interpreter
    spark_lib = "/opt/spark/python/lib"
    path = f"{spark_lib}/pyspark.zip:{spark_lib}/py4j-0.10.9.9-src.zip:/srv/app/deps.zip:/srv/app"
    out = subprocess.run(
        [
            command,
            "-c",
            "import os, sys, pyspark; print(os.environ.get('PYTHONPATH')); print(pyspark.__file__)",
        ],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0] == "/srv/app/deps.zip:/srv/app"
    assert ".zip" not in out[1]  # the installed package


def test_arguments_reach_the_interpreter_unchanged(tmp_path: Path) -> None:
    command = worker_python(sys.executable, tmp_path)
    out = subprocess.run(
        [command, "-c", "import sys; print(sys.argv[1:])", "a b", "$HOME", "*"],
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "['a b', '$HOME', '*']"


def test_a_directory_that_cannot_be_written_falls_back_to_the_interpreter_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="replicator.spark.pyworker"):
        assert worker_python(sys.executable, blocked / "scripts") == sys.executable
    assert "set TMPDIR to a writable directory" in caplog.text
