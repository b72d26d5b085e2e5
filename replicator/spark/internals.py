"""Every use of Spark's private surface, in one module.

PySpark's public API does not reach everything this job needs: its JVM launched in a session of
its own, a listener that takes a batch's progress as one JSON document, the Python planner
processes Spark keeps, the Hadoop FileSystem a checkpoint lives on, the offset log's format, the
JVM's cause inside a captured exception. Each is here as a named function that says what it
relies on and what it does when a new pyspark no longer has it; nothing else in the replicator
touches `_jvm`, `_gateway`, `_jsparkSession`, reflection or Spark's file formats.

Upgrading pyspark: `tests/integration/spark/test_internals.py` calls every function here on a
real session and fails loudly where one took its fallback (docs/design.md, "Upgrading pyspark").
Checked against pyspark 4.3 (the range pyproject.toml pins).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Spark's checkpoint file manager over Hadoop's FileSystem API (not its FileContext): an internal
# class, named in `spark.sql.streaming.checkpointFileManagerClass` (replicator.spark.session).
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def _jvm(spark: SparkSession) -> Any:
    return spark.sparkContext._jvm


# --- The JVM and its gateway -------------------------------------------------------------------

# When the first Python data source is registered, Spark looks for third-party ones (`pyspark_*`
# packages) in a Python process of its own, started with the interpreter the JVM finds in its
# PYSPARK_DRIVER_PYTHON, and only when that names a command it can find (DataSourceManager's
# `shouldLoadPythonDataSources`; the JVM reads that variable for nothing else here). The
# replicator registers its own source and uses no other: a name no command has skips the lookup,
# its ~0.5 s and its two processes. A pyspark without that check would start the lookup with
# this name, fail, and log a warning at each session start: data_source_lookup_skipped (checked
# by test_internals) says which this Spark does. Under spark-submit the JVM is not ours to start.
NO_DATA_SOURCE_LOOKUP = "stream-replicator-no-python-data-source-lookup"
_DATA_SOURCE_MANAGER = "org.apache.spark.sql.execution.datasources.DataSourceManager$"

# No code generated for plans whose rows never pass through them: a copy batch read by the driver
# itself still has Spark prepare its DataFrame for foreachBatch, generating (and, the first time,
# compiling) code that never runs. Whole-stage codegen is a public setting; the factory mode
# (expressions evaluated without generated code) is an internal one, which Spark's own tests use.
# test_internals checks that nothing is compiled under both.
NO_CODEGEN_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def codegen_compilations(spark: SparkSession) -> int:
    """How many classes Spark's code generator has compiled in this JVM (its codegen metrics)."""
    metrics = _jvm(spark).org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def numpy_check_without_pandas() -> bool:
    """PySpark checks every argument of every call into the JVM with its numpy converters, whose
    checks import `pyspark.testing.utils`, which imports pandas (0.8 s, ~30 MB) while the session
    starts. The same checks without that import (an object can only be a numpy value once numpy
    is imported): True when applied; False (pandas is then imported as before) when pyspark no
    longer has both converters. An embedded copy-only driver's pyarrow does not load it either
    (replicator.spark.arrow_without_pandas); elsewhere pyarrow's first array imports it."""
    from pyspark.sql import types

    scalar = getattr(types, "NumpyScalarConverter", None)
    array = getattr(types, "NumpyArrayConverter", None)
    if not all(callable(getattr(c, "can_convert", None)) for c in (scalar, array)):
        log.debug("pyspark has no NumpyScalarConverter/NumpyArrayConverter.can_convert: its own checks stay")
        return False

    # getattr: a numpy another thread is still importing may not have its types yet.
    def scalar_can_convert(self: Any, obj: Any) -> bool:
        generic = getattr(sys.modules.get("numpy"), "generic", None)
        return generic is not None and isinstance(obj, generic)

    def array_can_convert(self: Any, obj: Any) -> bool:
        ndarray = getattr(sys.modules.get("numpy"), "ndarray", None)
        return ndarray is not None and isinstance(obj, ndarray) and obj.ndim == 1

    scalar.can_convert = scalar_can_convert  # type: ignore[union-attr]
    array.can_convert = array_can_convert  # type: ignore[union-attr]
    return True


def accumulator_hangups_quiet() -> bool:
    """The driver's accumulator server (pyspark.accumulators) reads updates from the JVM until
    the JVM hangs up. Over a Unix socket (spark.python.unix.domain.socket.enabled, DEFAULT_CONF)
    a Java thread interrupted in its I/O closes the socket, as a query stopped for a retry can;
    pyspark then reads past the end, and socketserver prints the EOFError's traceback to stderr
    (test_faults met it once). The hang-up is logged at debug instead; any other error is shown
    as before. True when applied; False when pyspark has no such handler."""
    from pyspark import accumulators

    handler = getattr(accumulators, "UpdateRequestHandler", None)
    handle = getattr(handler, "handle", None)
    if handler is None or handle is None:
        log.debug("pyspark has no accumulators.UpdateRequestHandler.handle: its hang-ups stay loud")
        return False
    if getattr(handle, "sr_quiet_hangups", False):
        return True

    def handle_until_hung_up(self: Any) -> None:
        try:
            handle(self)
        except EOFError:
            log.debug("Spark's JVM closed its accumulator connection")

    handle_until_hung_up.sr_quiet_hangups = True  # type: ignore[attr-defined]
    handle_until_hung_up.sr_wrapped = handle  # type: ignore[attr-defined]  # pyspark's, for tests
    handler.handle = handle_until_hung_up
    return True


def data_source_lookup_skipped(spark: SparkSession) -> bool:
    """Whether Spark decided not to look up third-party Python data sources (its lazy
    `shouldLoadPythonDataSources`, read after the session registered a data source). Raises
    where this Spark decides another way (a field renamed or gone)."""
    jvm = _jvm(spark)
    decided = _private_field(jvm, _DATA_SOURCE_MANAGER, "bitmap$0", None)
    return bool(decided) and not _private_field(
        jvm, _DATA_SOURCE_MANAGER, "shouldLoadPythonDataSources", None
    )


def gateway_started() -> bool:
    """Whether this process already has Spark's JVM (PySpark's class-level gateway)."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None


def jvm_class_loads(name: str) -> bool:
    """Whether the launched JVM (before its SparkContext) loads class `name` from its class path."""
    from py4j.protocol import Py4JJavaError
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return False
    try:
        gateway.jvm.java.lang.Class.forName(name)
    except Py4JJavaError:
        return False
    return True


def launch_gateway(conf: SparkConf, popen_kwargs: dict[str, Any]) -> None:
    """Start Spark's JVM with `popen_kwargs` for its process (`pyspark.java_gateway.launch_gateway`,
    which takes them since 3.x) and make it the one every SparkContext of this process uses.
    No fallback: without it the JVM would share this process's session and group."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway as pyspark_launch_gateway

    gateway = pyspark_launch_gateway(conf, popen_kwargs=popen_kwargs)
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def connect_to_submitted_gateway() -> None:
    """Under spark-submit: connect to the JVM it started (PYSPARK_GATEWAY_PORT), before any
    session exists, to read the settings it was started with."""
    from pyspark import SparkContext

    SparkContext._ensure_initialized()


def gateway_process() -> Any | None:
    """The JVM's process (a subprocess.Popen) where this process launched it, else None."""
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


def jvm_answers(spark: SparkSession) -> bool:
    """Whether Spark's JVM answers a call (no: it died, or spark-submit's JVM was stopped)."""
    try:
        _jvm(spark).java.lang.System.currentTimeMillis()
    except Exception:
        return False
    return True


def jvm_class_exists(spark: SparkSession, name: str) -> bool:
    try:
        _jvm(spark).java.lang.Class.forName(name)
    except Exception:
        return False
    return True


# --- Each batch's progress ---------------------------------------------------------------------


class _ProgressListener:
    """The JVM's PythonStreamingQueryListener, implemented over py4j. PySpark's own listener turns
    each progress event into Python objects field by field, dozens of JVM calls per batch; this
    one asks for the progress as one JSON document."""

    def __init__(self, on_progress_json: Callable[[str], None]) -> None:
        self.on_progress_json = on_progress_json

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        try:
            self.on_progress_json(jevent.progress().json())
        except Exception:  # never into Spark's listener bus: it would log a stack trace per batch
            log.debug("handling a batch's progress failed", exc_info=True)

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def add_progress_listener(spark: SparkSession, on_progress_json: Callable[[str], None]) -> bool:
    """Call `on_progress_json(text)` with every batch's StreamingQueryProgress as JSON, on a thread
    of Spark's listener bus. As PySpark's own addListener does, the py4j callback server is
    started first. Fallback: False, logged once (batch steps are then missing from the metrics;
    copying is not affected)."""
    try:
        from pyspark import SparkContext
        from pyspark.java_gateway import ensure_callback_server_started

        ensure_callback_server_started(SparkContext._gateway)
        wrapper = _jvm(spark).org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(
            _ProgressListener(on_progress_json)
        )
        spark._jsparkSession.streams().addListener(wrapper)
    except Exception as e:
        log.warning("Spark's batch progress cannot be listened to (%s): batch step metrics are off", e)
        return False
    return True


# --- Spark's Python planner processes -----------------------------------------------------------

_FACTORY = "org.apache.spark.api.python.PythonWorkerFactory"


@dataclass
class PythonWorkerDaemon:
    """One of Spark's Python worker factories: the module its workers run, and whether its daemon
    runs with none of its workers taken."""

    module: str
    idle: bool
    factory: Any
    daemon: Any = None  # its java.lang.Process when listed
    jvm: Any = None

    def stop(self) -> None:
        """End the daemon and its idle workers; the factory starts a new daemon when needed.

        The daemon is sent SIGTERM first and ends its workers with SIGHUP, silently. Spark's own
        stop closes the idle workers' sockets before it signals the daemon, and a worker that saw
        its socket close first died printing a BrokenPipe traceback into the log (seen in CI
        under load)."""
        daemons = _daemon_processes(self.module)
        for pid in daemons:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 2.0
        while any(Path(f"/proc/{pid}").exists() for pid in daemons) and time.monotonic() < deadline:
            time.sleep(0.02)
        if daemons and self.jvm is not None:
            now = _private_field(self.jvm, _FACTORY, "daemon", self.factory)
            if now is not None and not self.jvm.java.util.Objects.equals(now, self.daemon):
                return  # a request meanwhile started a new daemon, whose worker is in use: keep it
        self.factory.stop()


# The daemon modules Spark starts Python processes with: pyspark's (planner steps always), and
# the one the session names for task workers (replicator.spark.daemon), should a later Spark
# start planners with it too.
_DAEMON_MODULES = (b"pyspark.daemon", b"replicator.spark.daemon")


def _daemon_processes(module: str) -> list[int]:
    """Pids of the `pyspark.daemon` processes for `module` that Spark's JVM started (its
    children; their workers are the daemons' children). Linux's /proc; elsewhere none, and
    Spark's own stop does it all."""
    proc = gateway_process()
    jvm = proc.pid if proc is not None else os.getppid()  # under spark-submit the JVM is our parent
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if not any(d in argv for d in _DAEMON_MODULES) or module.encode() not in argv:
                continue
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == jvm:
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _private_field(jvm: Any, class_name: str, field: str, owner: Any) -> Any:
    f = jvm.java.lang.Class.forName(class_name).getDeclaredField(field)
    f.setAccessible(True)
    return f.get(owner)


def python_worker_daemons(spark: SparkSession) -> list[PythonWorkerDaemon]:
    """Spark's Python worker factories, read by reflection from the private map `pythonWorkers`
    of its SparkEnv. Fields only, no method calls on SparkEnv: Py4J lists a class's methods to
    call one, and SparkEnv's name a protobuf class pyspark does not ship (NoClassDefFoundError).
    A factory is idle when its daemon runs and every worker it started (`daemonWorkers`) waits
    for reuse (`idleWorkers`). Raises a Py4J error on a Spark without these internals: the
    caller's fallback is to leave the processes alone."""
    jvm = _jvm(spark)
    companion = _private_field(jvm, "org.apache.spark.SparkEnv$", "MODULE$", None)
    env = _private_field(jvm, "org.apache.spark.SparkEnv$", "env", companion)
    workers = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
        _private_field(jvm, "org.apache.spark.SparkEnv", "pythonWorkers", env)
    )
    daemons = []
    for key in list(workers.keySet()):
        factory = workers.get(key)
        process = _private_field(jvm, _FACTORY, "daemon", factory)
        started = _private_field(jvm, _FACTORY, "daemonWorkers", factory)
        idle = process is not None and int(started.size()) == int(factory.idleWorkers().size())
        daemons.append(PythonWorkerDaemon(str(key.workerModule()), idle, factory, process, jvm))
    return daemons


# --- Hadoop's FileSystem, through the driver's JVM ----------------------------------------------


class HadoopFileSystem:
    """org.apache.hadoop.fs.FileSystem for one URI, over py4j, with the session's Hadoop
    configuration: spark.hadoop.* settings (fs.s3a.*) apply here as they do to Spark."""

    def __init__(self, spark: SparkSession, uri: str) -> None:
        self._jvm = _jvm(spark)
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        self.fs: Any = self.path(uri).getFileSystem(conf)

    def path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def read_utf8(self, path: Any) -> str:
        stream = self.fs.open(path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()


# --- Spark's streaming checkpoint files ---------------------------------------------------------


def offset_log_source_offset(text: str | None) -> dict[str, Any] | None:
    """The source's offset in one entry of a checkpoint's offset log (`offsets/<batch>`), for a
    query with one source: Spark writes a version line ("v1"), a line of batch metadata, then one
    JSON offset per source. None where the text is not in that form."""
    lines = (text or "").splitlines()
    if len(lines) < 3 or not lines[0].startswith("v"):
        return None
    try:
        offset = json.loads(lines[-1])
    except ValueError:
        return None
    return offset if isinstance(offset, dict) else None


# --- Errors raised through Spark ----------------------------------------------------------------

_CAUSES_AT_MOST = 20


def captured_error_texts(e: BaseException) -> list[str]:
    """The texts of `e` and its causes, outermost first. PySpark's captured exceptions keep their
    message in `_desc`, the JVM's cause in `_cause` and its stack trace, with its own "Caused by:"
    lines, in `_stackTrace` (stack frames left out here). Fallback: any other exception is its
    str()."""
    texts = [str(getattr(e, "_desc", None) or e)]
    link: object = e
    for _ in range(_CAUSES_AT_MOST):
        trace = getattr(link, "_stackTrace", None)
        if isinstance(trace, str):
            texts.append("\n".join(ln for ln in trace.splitlines() if not ln.lstrip().startswith("at ")))
        link = getattr(link, "_cause", None)
        if link is None:
            break
        texts.append(str(getattr(link, "_desc", None) or ""))
    return texts
