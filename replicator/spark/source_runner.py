"""Spark's streaming source runner for a Python data source, without pyarrow.

Spark keeps one Python process per streaming query for the life of the query, its runner
(`pyspark.sql.streaming.python_streaming_source_runner`): the JVM asks it for the stream's latest
offset, its partitions, and to commit. For a reader with partitions (ours) it never touches Arrow.
It imports `records_to_arrow_batches` from the read planner's module, though, for
prefetched rows of `SimpleDataSourceStreamReader`s, and that module imports pyarrow and numpy
first thing: ~40 MB of the runner's ~90 MB RSS, held as long as the query runs.

In local mode the workers' interpreter script (replicator.spark.pyworker) starts the runner
through this module, which puts a stand-in for the read planner's module in its place: any use
of it (a call of `records_to_arrow_batches`, or any other name a later pyspark imports from it)
loads the real module then, so nothing the runner does is changed, only when pyarrow is
loaded. `tests/integration/test_copy.py` checks that the runner of a copy loads no pyarrow.
"""

from __future__ import annotations

import importlib
import runpy
import sys
import types
from typing import Any

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
READ_PLANNER = "pyspark.sql.worker.plan_data_source_read"


def real_module(stand_in: types.ModuleType) -> types.ModuleType:
    """The real module of a stand-in's name, imported in its place (replicator.spark.read_planner
    stands in for pyarrow the same way)."""
    if sys.modules.get(stand_in.__name__) is stand_in:
        del sys.modules[stand_in.__name__]
    return importlib.import_module(stand_in.__name__)


def read_planner_stand_in() -> types.ModuleType:
    """A module in the read planner's name that loads the real one when anything of it is used."""
    stand_in = types.ModuleType(READ_PLANNER)

    def records_to_arrow_batches(*args: Any, **kwargs: Any) -> Any:
        return real_module(stand_in).records_to_arrow_batches(*args, **kwargs)

    def __getattr__(name: str) -> Any:  # PEP 562: names the stand-in does not have
        if name.startswith("__"):  # the import system's own questions (`__path__`, say)
            raise AttributeError(name)
        return getattr(real_module(stand_in), name)

    stand_in.records_to_arrow_batches = records_to_arrow_batches  # type: ignore[attr-defined]
    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
    return stand_in


def main(argv: list[str]) -> None:
    """`python -m replicator.spark.source_runner <module>`: runs <module> as `python -m` would,
    with the stand-in in place when it is Spark's streaming source runner."""
    module = argv[1] if len(argv) > 1 else RUNNER
    if module == RUNNER and READ_PLANNER not in sys.modules:
        importlib.import_module("pyspark.sql.worker")  # the stand-in's package, the real one
        sys.modules[READ_PLANNER] = read_planner_stand_in()
    sys.argv = argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv)
