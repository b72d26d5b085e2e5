"""Spark's Python daemon (`pyspark.daemon`), with its reused workers' collections made cheap.

Spark starts its task workers' daemon as `python -m <spark.python.daemon.module> pyspark.worker`
(its planner steps run under `pyspark.daemon`, or without a daemon in an embedded copy-only
process, which runs no tasks but in a batch its driver could not read); the session names this module
(replicator.spark.session). It runs pyspark's own daemon and changes one thing.

With worker reuse, pyspark's daemon runs a full `gc.collect()` in a worker after every task. A
worker holds ~90,000 objects from its imports (pyspark, pandas, pyarrow, numpy, nats-py), so
each collection took ~50 ms however small the task: a fifth of the task workers' CPU while a
sampled stream was read and decided (py-spy over `bench.sampling_bench`), where every batch
runs a task per shuffle partition. Here a worker, after its first task, collects in full once
and then freezes what it holds (`gc.freeze`: its imports and caches are left out of later
collections). Every later collection looks only at objects made since, so a task's cyclic
garbage is still freed after that task.
"""

from __future__ import annotations

import gc
import os
import socket
import warnings

from pyspark import daemon

from replicator.spark import stateful_arrow
from replicator.spark.arrow_without_pandas import pyarrow_without_pandas, workers_without_pandas

# pyspark's own pandas calls for a stateful pandas function (applyInPandasWithState, the sampled
# path) pad its output with all-NA rows and concatenate: pandas 2 warns that this will type the
# result differently in a later pandas, once per worker, and the warning reached the log at
# WARNING. Nothing the replicator passes can change it; its forked workers inherit this filter.
warnings.filterwarnings(
    "ignore",
    message="The behavior of DataFrame concatenation with empty or all-NA entries is deprecated",
    category=FutureWarning,
)

_pyspark_worker = daemon.worker
_frozen = False
_pandas_asked = False  # whether this worker process has made pyarrow take pandas as absent


def prepare_worker() -> None:
    """Before each task, in the forked worker (see stateful_arrow's imports): the sampled rules
    on Arrow, and where the session says no pandas object is made here, pyarrow without pandas
    (replicator.spark.arrow_without_pandas; asked once per worker process)."""
    global _pandas_asked
    if stateful_arrow.install() and workers_without_pandas() and not _pandas_asked:
        pyarrow_without_pandas()
        _pandas_asked = True


def worker(sock: socket.socket, authenticated: bool) -> int:
    """pyspark's worker (one task), then, after the first, the long-lived objects frozen."""
    global _frozen
    prepare_worker()
    code = _pyspark_worker(sock, authenticated)
    # Only a worker that goes on to another task: pyspark's ends after a failed task, or after
    # each one without reuse.
    if not _frozen and code == 0 and os.environ.get("SPARK_REUSE_WORKER"):
        gc.collect()
        gc.freeze()
        _frozen = True
    return code


# The daemon's fork loop calls `worker` by its module-level name.
daemon.worker = worker

if __name__ == "__main__":
    daemon.manager()
