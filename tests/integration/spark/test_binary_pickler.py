"""Spark's binary values reach Python as the same bytes with our pickler as with Spark's
(replicator.spark.binary_pickler), in a real embedded session.

A fresh driver (its own JVM: a pickler, once installed, is the JVM's) sends the same binary
values to Python before and after the install, through a Python UDF on Spark's workers (rows
pickled, not Arrow) and through collect, with the jar and without it (Spark's pickler stays).
The sampled pipeline's exactness with the pickler in place is
tests/integration/test_sampling_property.py's, which checks that a sampled query installed it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

DRIVER = textwrap.dedent(
    """
    import hashlib, json, random, sys
    from pyspark.sql.functions import udf
    from replicator.spark.binary_pickler import install_binary_pickler
    from replicator.spark.session import build_session
    from tests.helpers import binary_pickled_as_bytes

    if sys.argv[1] == "without-jar":  # as where javac is missing (a JRE only) or the build failed
        import replicator.spark.session
        replicator.spark.session.ready_jar = lambda *a, **k: None
    rnd = random.Random(7)
    values = [b"", bytes(range(256)), rnd.randbytes(300_000), bytes(70_000), "é€".encode(), None]
    spark = build_session("local[1]", "binary-pickler")
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "false")  # rows, as pickles
    df = spark.createDataFrame(list(enumerate(values)), "i INT, b BINARY").repartition(2)
    digest = udf(  # rows pickled to the workers, not Arrow batches (Spark 4's default for UDFs)
        lambda b: None if b is None else type(b).__name__ + ":" + hashlib.sha256(b).hexdigest(), useArrow=False
    )

    def seen():
        on_workers = {r.i: r.d for r in df.select("i", digest("b").alias("d")).collect()}
        in_driver = {r.i: r.b for r in df.collect()}
        return [
            [on_workers[i], None if in_driver[i] is None else type(in_driver[i]).__name__ + ":"
             + hashlib.sha256(in_driver[i]).hexdigest()]
            for i in range(len(values))
        ]

    out = {"before": {"ours": binary_pickled_as_bytes(spark), "seen": seen()}}
    out["installed"] = [install_binary_pickler(spark), install_binary_pickler(spark)]
    out["after"] = {"ours": binary_pickled_as_bytes(spark), "seen": seen()}
    spark.stop()
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("jar", ["with-jar", "without-jar"])
def test_binary_values_reach_python_workers_and_the_driver_the_same_with_our_pickler(jar: str) -> None:
    env = dict(os.environ)
    env.pop("SPARK_DIST_CLASSPATH", None)  # an earlier session in this process put the jar there
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, jar], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])

    import hashlib

    rnd = random.Random(7)
    values = [b"", bytes(range(256)), rnd.randbytes(300_000), bytes(70_000), "é€".encode(), None]
    want = [None if v is None else f"bytes:{hashlib.sha256(v).hexdigest()}" for v in values]
    ours = jar == "with-jar"  # without it, Spark's own pickler stays, and nothing fails
    assert out["installed"] == [ours, ours]
    assert out["before"]["ours"] is False and out["after"]["ours"] is ours
    for phase in ("before", "after"):
        assert out[phase]["seen"] == [[w, w] for w in want], phase
