"""Spark's binary values sent to Python workers as bytes, not as a string built per byte.

A sampled query's stateful step sends each bucket's sender table (replicator.sampling.state, a
binary state value) to the Python workers every batch, pickled in the JVM by Spark's pickler for
binary values: a Java string built one char per byte, encoded as UTF-8, and rebuilt in Python as
bytes(bytearray(s, 'latin-1')). At 100,000 senders that was over a third of the JVM's samples
(docs/performance.md, 2026-12-06). `streamreplicator.spark.BinaryPickler` (in `java/`, built into
the jar of replicator.spark.localfs) writes the pickle opcode for bytes and the bytes themselves;
Python unpickles both to the same bytes object. Embedded only: on a cluster the executors' JVMs
do not have the jar, and keep Spark's pickler.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from replicator.spark.localfs import PICKLER_CLASS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def install_binary_pickler(spark: SparkSession) -> bool:
    """Our pickler for binary values in this session's JVM, where Spark runs embedded (its
    executors in that JVM: `local`, `local[N]`) and the JVM loads the jar. False where Spark's
    own pickler stays: it gives Python the same bytes, so nothing here stops a query."""
    from py4j.java_gateway import JavaClass

    master = str(spark.sparkContext.master)
    if master != "local" and not master.startswith("local["):
        return False
    try:
        # py4j names a class it cannot load as a package (the jar not built, or not on the
        # class path).
        pickler = getattr(spark.sparkContext._jvm, PICKLER_CLASS)
        if not isinstance(pickler, JavaClass):
            why = f"no {PICKLER_CLASS} in the JVM"
        elif not pickler.install():
            why = "its wrapper class not found"
        else:
            return True
    except Exception as e:  # an optimisation: any failure keeps Spark's pickler
        why = (str(e).splitlines() or [type(e).__name__])[0]
    log.info("binary values go to Python workers through Spark's own pickler (%s)", why)
    return False
