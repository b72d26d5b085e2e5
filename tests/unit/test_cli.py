"""The command line's own behaviour (no servers): versions."""

from __future__ import annotations

import re
import subprocess
import sys


def test_version_names_the_project_spark_nats_py_and_java() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "replicator.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split(" ")[0] for line in lines] == ["stream-replicator", "pyspark", "nats-py", "java"]
    assert re.match(r"stream-replicator \d+\.\d+\.\d+$", lines[0])
    assert re.match(r"java \d+", lines[3]), lines[3]
