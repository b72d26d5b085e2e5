"""Start Spark's Python task workers while the first query is still being planned.

A query's first batch otherwise waits, after planning, for Spark to start the task daemon, fork
a worker per core and import pyarrow and nats in each. A job of one tiny task per core, run
beside the planning, starts them earlier; Spark keeps them for reuse, and the data source's
read tasks take them (same worker module and environment). On 2 cores the first batch's
collect went from ~3.1 s to ~0.8 s, but the planning beside it slowed: the time to the first
copy moved from 13.6 to 12.7 s (medians of 3 alternated one-off runs of 20,000 messages).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)


def _import_reader_modules(batches: Iterator[Any]) -> Iterator[Any]:
    import replicator.nats.connect
    import replicator.nats.jetstream
    import replicator.spark.rows  # noqa: F401

    yield from batches


def _import_sampling_modules(batches: Iterator[Any]) -> Iterator[Any]:
    # The sampling step runs in these same (reused) workers: the decision code loads now, not
    # in a new leader's first batch; pandas too unless the workers were told they make no
    # pandas object (the rules on Arrow: replicator.spark.arrow_without_pandas).
    from replicator.spark.arrow_without_pandas import workers_without_pandas
    from replicator.spark.stateful_arrow import pysparks_worker_runs

    if pysparks_worker_runs() or not workers_without_pandas():
        import pandas  # noqa: F401

    import replicator.spark.sampling  # noqa: F401

    yield from _import_reader_modules(batches)


def warm_task_workers(spark: Any, sampling: bool = False) -> None:
    """Run the warm-up job on a background thread (best effort: a failure only logs);
    `sampling`: some stream samples (its workers load the decision code too)."""
    slots = max(1, int(spark.sparkContext.defaultParallelism))
    imports = _import_sampling_modules if sampling else _import_reader_modules

    def run() -> None:
        try:
            spark.range(0, slots, 1, slots).mapInArrow(imports, "id long").collect()
        except Exception as e:
            log.debug("warming Spark's task workers failed (%s)", e)

    threading.Thread(target=run, name="warm-task-workers", daemon=True).start()
