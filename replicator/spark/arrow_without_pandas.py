"""pyarrow in a process that never converts to pandas, without pandas.

pyarrow looks for pandas the first time it builds an array (does the value come from pandas?),
and imports it when it is installed: ~30 MB of the driver's RSS while it copies a backlog
(bench.memory_probe), for a check whose answer is always no where no pandas object is ever made.
Embedded, a copy-only driver is such a process (its rows come from NATS, its batches' DataFrames
are never collected). Here pyarrow asks once while pandas cannot be imported, and keeps that
answer for the arrays it builds until something needs pandas itself: a conversion to pandas
(`to_pandas`) imports it and works, and pyarrow sees pandas from then on. Before that, pyarrow
would take a pandas object given to `pa.array` (or pyspark's `createDataFrame` of a pandas
DataFrame) as a plain sequence (NaN a number, not a null), so only a process that builds none
calls this.

Embedded, Spark's Python task workers are such processes too: they build their rows' arrays
from NATS messages and run the sampled rules on Arrow (replicator.spark.stateful_arrow), so
pandas (~47 MB a worker) is never needed there, but for pyspark's own stateful code (another
pyspark series, STREAM_REPLICATOR_STATE_WORKER=pyspark, or its UDF profiler wrapping the
rules). The session sets WORKERS_ENV for workers where none of that can happen, and
replicator.spark.daemon calls this in each worker that runs the rules on Arrow.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

# "1" in the environment of Spark's Python workers that make no pandas object unless pyspark's
# own stateful code runs (set by replicator.spark.session, read by replicator.spark.daemon).
WORKERS_ENV = "STREAM_REPLICATOR_WORKERS_WITHOUT_PANDAS"


def workers_without_pandas() -> bool:
    return os.environ.get(WORKERS_ENV) == "1"


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "pandas":
            raise ModuleNotFoundError("pandas is kept out of pyarrow here", name=fullname)
        return None


def pyarrow_without_pandas() -> bool:
    """Make pyarrow take pandas as absent for building arrays; False (and nothing done) when
    pandas is already imported, and so already known to pyarrow or about to be."""
    if "pandas" in sys.modules:
        return False
    import pyarrow as pa

    blocker = _NoPandas()
    # New lists rather than changes in place: an import under way on another thread (the NATS
    # loop's) goes on over the list it started with.
    sys.meta_path = [blocker, *sys.meta_path]
    try:
        pa.array([0])  # pyarrow's first look for pandas, answered "not installed"
    finally:
        sys.meta_path = [f for f in sys.meta_path if f is not blocker]
    return "pandas" not in sys.modules
