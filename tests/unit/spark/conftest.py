"""Fixtures shared by the Spark unit tests."""

from __future__ import annotations

import pytest

from replicator.spark.arrow_without_pandas import WORKERS_ENV

# What replicator.spark.session.embedded_settings sets in this process's environment, for the
# JVM and the Python workers it starts to inherit.
LAUNCH_ENV = (
    "SPARK_DIST_CLASSPATH",
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
    "MALLOC_ARENA_MAX",
    WORKERS_ENV,
)


@pytest.fixture
def launch_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """embedded_settings' environment, cleared for the test and restored after it (set first,
    so that monkeypatch records a name that was absent and removes it again)."""
    for name in LAUNCH_ENV:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
