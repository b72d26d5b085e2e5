"""Spark's read planner step for a Python data source, without pyarrow.

As a query starts, Spark plans its reads in a short-lived Python process that runs
`pyspark.sql.worker.plan_data_source_read`: it makes the stream reader and sends the JVM the
function its tasks will read with. That module imports pyarrow first thing (~40 MB of the
process's ~85 MB RSS) for the function's body and for annotations; the planning itself never
uses it. Without a pyspark daemon (an embedded copy-only process) the process lives about a
second, just as the driver copies a backlog ahead with its largest working set: the replicator
tree's peak (bench.memory_probe, 200,000 messages: 631-634 MB, 85 MB of it this process).

In local mode the workers' interpreter script (replicator.spark.pyworker) starts the step
through this module, which runs the planner's own code as `python -m` would, with two changes:
its annotations are compiled postponed (PEP 563: kept as strings, never evaluated), and
`pyarrow` is a stand-in that loads the real one as soon as anything of it is used. The function
sent to the tasks is the planner's own; it names pyarrow as a module, so a task imports the real
one. `tests/unit/spark/test_read_planner.py` checks both.
"""

from __future__ import annotations
import __future__

import builtins
import importlib.abc
import importlib.util
import sys
import types
from typing import Any

from replicator.spark.source_runner import READ_PLANNER, real_module


def pyarrow_stand_in() -> types.ModuleType:
    """A module named pyarrow that loads the real one when any of its names is asked for."""
    stand_in = types.ModuleType("pyarrow")

    # PEP 562: every name the module lacks, dunders (`__path__`) included; a module already has
    # `__spec__`, `__loader__`, `__package__` and `__doc__` (None), which load nothing.
    def __getattr__(name: str) -> Any:
        return getattr(real_module(stand_in), name)

    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
    return stand_in


def read_planner_code() -> tuple[types.CodeType, Any]:
    """The planner module's code with postponed annotations, and its import spec."""
    spec = importlib.util.find_spec(READ_PLANNER)
    loader = spec.loader if spec is not None else None
    source = loader.get_source(READ_PLANNER) if isinstance(loader, importlib.abc.InspectLoader) else None
    if spec is None or source is None:
        raise ImportError(f"no source for {READ_PLANNER}")
    flags = __future__.annotations.compiler_flag
    return compile(source, spec.origin or READ_PLANNER, "exec", flags=flags, dont_inherit=True), spec


def main(argv: list[str]) -> None:
    """`python -m replicator.spark.read_planner pyspark.sql.worker.plan_data_source_read [ARG...]`:
    the planner step, run as `python -m pyspark.sql.worker.plan_data_source_read [ARG...]` would
    run it (as `__main__`). Its module's name stays in the command line, for `ps` and the tests."""
    if len(argv) < 2 or argv[1] != READ_PLANNER:
        raise SystemExit(f"usage: python -m replicator.spark.read_planner {READ_PLANNER} [ARG...]")
    code, spec = read_planner_code()
    if "pyarrow" not in sys.modules:
        sys.modules["pyarrow"] = pyarrow_stand_in()
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(
        __file__=spec.origin, __loader__=spec.loader, __package__=spec.parent, __spec__=spec,
        __cached__=None, __builtins__=builtins,
    )  # fmt: skip
    sys.modules["__main__"] = main_module
    sys.argv = [spec.origin or READ_PLANNER, *argv[2:]]
    exec(code, main_module.__dict__)


if __name__ == "__main__":
    main(sys.argv)
