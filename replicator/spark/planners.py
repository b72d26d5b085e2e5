"""Stop the Python processes Spark keeps after planning a query.

Starting a query on a Python data source runs short planner steps (create the source, plan its
reads; under spark-submit also a lookup of other data sources, which the replicator's own JVM
skips: replicator.spark.internals.NO_DATA_SOURCE_LOOKUP), each in a worker forked by its own
`pyspark.daemon` (an embedded copy-only process runs without the daemon, and there each step's
process ends with it: replicator.spark.session.NO_PYTHON_DAEMON_CONF). Spark keeps each daemon
for the life of the session, and its last worker for a minute: with the lookup, six idle
processes, ~420 MB summed RSS in a one-off sample of the replicator's process tree during a
`make bench`-sized copy, about a fifth of it. Neither `spark.python.factory.idleWorkerMaxPoolSize`
(at least 1) nor `spark.python.worker.killOnIdleTimeout` (inside tasks only) releases them.

Spark keeps these processes in a private map of its `SparkEnv`, with no public way to stop them,
so this reaches it by reflection (replicator.spark.internals.python_worker_daemons). Stopping a
factory ends its daemon and idle workers; the factory stays usable and starts a new daemon when
a later query start needs one. A factory with a worker in use is left alone, and the runner
calls this once every query has started a batch (replicator.runner); should a step still take a
worker in the instant between that check and the stop, that query start or batch fails and is
retried from the checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from replicator.spark.internals import python_worker_daemons

log = logging.getLogger(__name__)

# Spark's planner steps run the modules `pyspark.sql.worker.*`; tasks run `pyspark.worker`, and
# a streaming source's long-lived runner `pyspark.sql.streaming.*`. Only the first are idle.
PLANNER_MODULE_PREFIX = "pyspark.sql.worker."
# The steps that run in the thread calling `readStream...load()` (the one that plans a query's
# reads runs later, on the query's thread).
SOURCE_CREATION_MODULES = (
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
)


def planners_left(spark: Any) -> bool:
    """Whether a daemon of Spark's planner steps still runs (False where Spark's internals
    cannot be read: nothing more can be done about them then)."""
    try:
        daemons = python_worker_daemons(spark)
        return any(d.module.startswith(PLANNER_MODULE_PREFIX) and d.daemon is not None for d in daemons)
    except Exception:  # a Py4J error: another Spark version's internals
        return False


def release_idle_planners(spark: Any, modules: Sequence[str] | None = None) -> list[str]:
    """Stop the daemons (and idle workers) of Spark's planner steps (or of `modules` only) that
    have no worker in use; return their modules. Best effort: on a Spark without these
    internals it logs and does nothing."""
    try:
        stopped = []
        for daemon in python_worker_daemons(spark):
            m = daemon.module
            wanted = m in modules if modules is not None else m.startswith(PLANNER_MODULE_PREFIX)
            if wanted and daemon.idle:
                daemon.stop()
                stopped.append(m)
    except Exception as e:  # a Py4J error: another Spark version's internals
        log.info("could not release Spark's idle planner processes (%s); they stay", e)
        return []
    if stopped:
        log.debug("released Spark's idle planner processes: %s", ", ".join(sorted(stopped)))
    return stopped
