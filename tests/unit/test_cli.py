"""The command line's own behaviour (no servers): versions."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_version_names_the_project_spark_nats_py_and_java() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "replicator.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split(" ")[0] for line in lines] == ["stream-replicator", "pyspark", "nats-py", "java"]
    assert re.match(r"stream-replicator \d+\.\d+\.\d+$", lines[0])
    assert re.match(r"java \d+", lines[3]), lines[3]


def test_run_with_a_logfile_it_cannot_open_says_so_in_one_line(tmp_path: Path) -> None:
    """It was a traceback (found by a review). Checked at `run`, not as the config is read: the
    folder may exist only on the server the config is for, and `validate` runs elsewhere too."""
    cfg = tmp_path / "sr.yaml"
    cfg.write_text(
        f"name: dc1\nlogfile: {tmp_path / 'missing' / 'sr.log'}\n"
        "streams: [{stream: S, source_url: 'nats://127.0.0.1:1', target_url: 'nats://127.0.0.1:2'}]\n"
    )
    checked = subprocess.run(
        [sys.executable, "-m", "replicator.cli", "validate", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr
    r = subprocess.run(
        [sys.executable, "-m", "replicator.cli", "run", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert (
        "sr.log: cannot open it (No such file or directory): create its folder, fix its permissions, or choose another file"
        in r.stderr
    )


def test_run_with_a_spark_master_spark_would_refuse_says_so_in_one_line(tmp_path: Path) -> None:
    """A master Spark cannot parse was found only once the JVM was launched: a Java stack logged
    as warnings and `[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port
    number` (naming neither the key nor the fix), or, with the source unreachable, nothing
    until it was stopped."""
    cfg = tmp_path / "sr.yaml"
    cfg.write_text(
        "name: dc1\nstreams: [{stream: S, source_url: 'nats://127.0.0.1:1', target_url: 'nats://127.0.0.1:2'}]\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "replicator.cli", "run", "-c", str(cfg), "--spark-master", "lcoal[*]"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--spark-master: 'lcoal[*]' is not a Spark master URL: use local[*]" in r.stderr
