"""Every finished micro-batch's progress, handed to Python as it happens (a Spark streaming
query listener), so each batch's steps reach the metrics and a slow one is logged.

PySpark's own listener turns each progress event into Python objects field by field, dozens of
calls into the JVM per batch; this one asks for the progress as one JSON document.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ProgressHandler = Callable[[dict[str, Any]], None]


class _BatchProgressListener:
    """The JVM's PythonStreamingQueryListener, implemented over py4j."""

    def __init__(self, on_progress: ProgressHandler) -> None:
        self.on_progress = on_progress

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        try:
            self.on_progress(json.loads(jevent.progress().json()))
        except Exception:  # never into Spark's listener bus: it would log a stack trace per batch
            log.debug("handling a batch's progress failed", exc_info=True)

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def listen_to_batches(spark: SparkSession, on_progress: ProgressHandler) -> None:
    """Call `on_progress(progress)` (a StreamingQueryProgress as a dict) after every batch of
    every query of `spark`, on a thread of Spark's listener bus, not the query's."""
    jvm: Any = spark.sparkContext._jvm
    wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(
        _BatchProgressListener(on_progress)
    )
    spark._jsparkSession.streams().addListener(wrapper)
