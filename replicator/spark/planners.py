"""Stop the Python processes Spark keeps after planning a query.

Starting a query on a Python data source runs three short planner steps (look up data sources,
create the source, plan its reads), each in a worker forked by its own `pyspark.daemon`. Spark
keeps each daemon for the life of the session, and its last worker for a minute: six idle
processes, ~420 MB summed RSS in a one-off sample of the replicator's process tree during a
`make bench`-sized copy, about a fifth of it. Neither `spark.python.factory.idleWorkerMaxPoolSize` (at least 1) nor
`spark.python.worker.killOnIdleTimeout` (inside tasks only) releases them.

Spark keeps these processes in a private map of its `SparkEnv`, with no public way to stop them,
so this reaches it by reflection (pyspark 4.3, which pyproject pins). Stopping a factory ends
its daemon and idle workers; the factory stays usable and starts a new daemon when a later
query start needs one. A factory with a worker in use is left alone, and the runner calls this
only for steps that are over (replicator.runner); should one still take a worker in the instant
between that check and the stop, that query start fails and the runner retries it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

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


def _private_field(jvm: Any, class_name: str, field: str, owner: Any) -> Any:
    f = jvm.java.lang.Class.forName(class_name).getDeclaredField(field)
    f.setAccessible(True)
    return f.get(owner)


def _factories(spark: Any) -> Any:
    """Spark's map of Python worker factories, as a java.util.Map (key: PythonWorkersKey).
    Fields only, no method calls on SparkEnv: Py4J lists a class's methods to call one, and
    SparkEnv's name a protobuf class that pyspark does not ship (NoClassDefFoundError)."""
    jvm = spark.sparkContext._jvm
    companion = _private_field(jvm, "org.apache.spark.SparkEnv$", "MODULE$", None)
    env = _private_field(jvm, "org.apache.spark.SparkEnv$", "env", companion)
    workers = _private_field(jvm, "org.apache.spark.SparkEnv", "pythonWorkers", env)
    return jvm.scala.jdk.javaapi.CollectionConverters.asJava(workers)


_FACTORY = "org.apache.spark.api.python.PythonWorkerFactory"


def _idle(spark: Any, factory: Any) -> bool:
    """Whether the factory has a daemon running and none of its workers is taken (each worker it
    started and has not stopped is in `daemonWorkers`; those waiting for reuse in `idleWorkers`)."""
    jvm = spark.sparkContext._jvm
    if _private_field(jvm, _FACTORY, "daemon", factory) is None:
        return False
    started = _private_field(jvm, _FACTORY, "daemonWorkers", factory)
    return int(started.size()) == int(factory.idleWorkers().size())


def release_idle_planners(spark: Any, modules: Sequence[str] | None = None) -> list[str]:
    """Stop the daemons (and idle workers) of Spark's planner steps (or of `modules` only) that
    have no worker in use; return their modules. Best effort: on a Spark without these
    internals it logs and does nothing."""
    try:
        factories = _factories(spark)
        stopped = []
        for key in list(factories.keySet()):
            module = str(key.workerModule())
            wanted = module in modules if modules is not None else module.startswith(PLANNER_MODULE_PREFIX)
            factory = factories.get(key)
            if wanted and _idle(spark, factory):
                factory.stop()
                stopped.append(module)
    except Exception as e:  # a Py4J error: another Spark version's internals
        log.info("could not release Spark's idle planner processes (%s); they stay", e)
        return []
    if stopped:
        log.debug("released Spark's idle planner processes: %s", ", ".join(sorted(stopped)))
    return stopped
