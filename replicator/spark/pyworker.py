"""The interpreter command Spark starts its Python processes with, in local mode.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on every Python worker's
path. Python cannot keep compiled bytecode for modules imported from a zip, so each worker,
planner and streaming source runner compiles pyspark's modules again as it starts: importing
the streaming source runner took 1.15-1.41 s from the zip and 0.40-0.47 s from the installed
package (same pyspark, same interpreter; two runs each on this 2-core machine). On a busy host
that difference is what pushed worker starts past Spark's fixed 10 s connect-back limit
("Timed out while waiting for the Python worker to connect back").

With pyspark installed as a package (pip), the zips hold the same code: a small shell script
drops them from PYTHONPATH and runs the real interpreter, so workers import the compiled
package. Anything else on PYTHONPATH (say, spark-submit's --py-files) is kept. The same script
starts a streaming query's runner through replicator.spark.source_runner and its read planner
step through replicator.spark.read_planner (no pyarrow in either).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

_SCRIPT = """#!/bin/sh
# Written by stream-replicator (replicator/spark/pyworker.py): runs {python} with
# pyspark's and py4j's zips taken off PYTHONPATH, so the installed, compiled pyspark is used.
kept=""
old_ifs="$IFS"
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    */pyspark.zip|*/py4j-*.zip) ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
  esac
done
IFS="$old_ifs"
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
# Spark's streaming source runner and its read planner step start through modules that keep
# them from loading pyarrow, which they do not use (replicator/spark/source_runner.py and
# replicator/spark/read_planner.py).
if [ "$1" = "-m" ] && [ "$2" = "pyspark.sql.streaming.python_streaming_source_runner" ]; then
  shift
  set -- -m replicator.spark.source_runner "$@"
elif [ "$1" = "-m" ] && [ "$2" = "pyspark.sql.worker.plan_data_source_read" ]; then
  shift
  set -- -m replicator.spark.read_planner "$@"
fi
exec {quoted} "$@"
"""


def installed_pyspark() -> bool:
    """Whether pyspark is imported from an installed package (not from a zip itself)."""
    import pyspark

    return ".zip" not in (pyspark.__file__ or ".zip")


def worker_python(python: str, directory: Path | None = None) -> str:
    """A command that runs `python` without pyspark's zips on its path (see the module
    docstring), written once per interpreter into `directory` (a private temporary one by
    default); `python` itself when pyspark is not an installed package."""
    if not installed_pyspark():
        return python
    base = directory or Path(tempfile.gettempdir()) / f"stream-replicator-{os.getuid()}"
    text = _SCRIPT.format(python=python, quoted=shlex.quote(python))
    path = base / f"python-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            # Atomically: another replicator on this host may be starting from the same file.
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, path)
    except OSError as e:  # a read-only temporary directory, say: slower starts, nothing else
        log.warning(
            "could not write %s (%s); Spark's Python processes start from pyspark's zip, "
            "about 1 s slower each (set TMPDIR to a writable directory)",
            path,
            e,
        )
        return python
    return str(path)
