"""Every finished micro-batch's progress, handed to Python as it happens (a Spark streaming
query listener, replicator.spark.internals), so each batch's steps reach the metrics and a slow
one is logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from replicator.spark.internals import add_progress_listener

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ProgressHandler = Callable[[dict[str, Any]], None]


def listen_to_batches(spark: SparkSession, on_progress: ProgressHandler) -> bool:
    """Call `on_progress(progress)` (a StreamingQueryProgress as a dict) after every batch of
    every query of `spark`, on a thread of Spark's listener bus, not the query's. False when
    this Spark cannot be listened to (logged; copying goes on without batch step metrics)."""
    return add_progress_listener(spark, lambda text: on_progress(json.loads(text)))
