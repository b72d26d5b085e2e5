"""SparkSession set up for this job: embedded `local[*]` by default, or a cluster master URL."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from replicator.spark.arrow_without_pandas import WORKERS_ENV, pyarrow_without_pandas
from replicator.spark.internals import (
    CHECKPOINT_FILE_MANAGER,
    NO_CODEGEN_CONF,
    NO_DATA_SOURCE_LOOKUP,
    accumulator_hangups_quiet,
    jvm_class_loads,
    numpy_check_without_pandas,
)
from replicator.spark.localfs import (
    HADOOPS_CLASS,
    RAW_CLASS,
    add_to_launch_class_path,
    for_the_launch,
    for_the_launched_jvm,
    local_fs_conf,
    ready_jar,
)
from replicator.spark.pyworker import worker_python
from replicator.spark.session_args import SessionArgs

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from replicator.spark.early_jvm import EarlyJvm

# Tuned for a streaming copy job on a small machine; each one measured in `make bench`.
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.python.worker.reuse": "true",
    # pyspark's daemon, whose reused workers skip the full collection of their imports after
    # each task (replicator.spark.daemon): a fifth of the task workers' CPU on a sampled stream.
    "spark.python.daemon.module": "replicator.spark.daemon",
    "spark.driver.memory": "768m",
    "spark.executor.memory": "768m",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    # Keep checkpoint metadata small: a copy job needs only the last few batches to recover.
    "spark.sql.streaming.minBatchesToRetain": "20",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    # Offset and commit logs written through Hadoop's FileSystem API rather than its FileContext
    # (still written aside and renamed into place): 8 + 10 ms per batch instead of 15 + 20, a
    # third of a one-message batch (`make bench`, latency). state_store is a local directory.
    "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
    # Python workers talk to the JVM over a Unix socket: over TCP each small batch's task waited
    # ~40 ms on delayed ACKs (a one-row mapInArrow job: 94 ms median, 50 ms with it).
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.log.level": "WARN",
}


# For an embedded session whose queries keep no state (every entry copy-only) and whose
# checkpoints are local: checkpoint files without Hadoop's `.crc` checksum beside each, which
# halves the offset and commit logs' cost per batch, most of a live copy's latency (`make bench`,
# latency; docs/performance.md). The files are still written aside and renamed into place, and
# neither kind is synced to disk, so resume is as before. Everything else keeps the checksummed
# file system: Spark's RocksDB state store and Hadoop's local buffers (s3a's uploads, YARN) ask
# for that class and fail with any other.
RAW_LOCAL_CONF: dict[str, str] = {"spark.hadoop.fs.file.impl": HADOOPS_CLASS[RAW_CLASS]}

# For an embedded process whose driver reads every batch itself (every entry copy-only): no task
# of Spark's runs Python but in a batch the driver could not read, so its Python processes are
# the queries' short planner steps and their runners. Without pyspark's daemon a step is one
# process that ends with it; with it, the daemon (~35 MB) and its forked worker (~79 MB) stayed
# until replicator.spark.planners stopped them, through the first batch (bench.memory_probe,
# docs/performance.md). A batch the driver could not read starts a process for each of its tasks.
NO_PYTHON_DAEMON_CONF: dict[str, str] = {"spark.python.use.daemon": "false"}

QUIET_LOG_CONFIG = Path(__file__).with_name("log4j2-quiet.properties")
# pyspark's UDF profiler: where it is on, pyspark's own (pandas) code runs the sampled rules.
UDF_PROFILER_CONF = "spark.sql.pyspark.udf.profiler"


def python_for_workers() -> str:
    """The interpreter Spark's Python workers must use: this venv's, not whatever is on PATH."""
    return sys.executable


def build_session(
    master: str = "local[*]",
    app_name: str = "stream-replicator",
    conf: dict[str, str] | None = None,
    create_class_archive: bool = False,
    light_jvm: bool = True,
    driver_reads_all: bool = False,
    quiet: bool = True,
    raw_local_checkpoints: bool = False,
    launched: EarlyJvm | None = None,
) -> SparkSession:
    """`quiet`: Spark's own log shows errors only (the replicator's loglevel is not debug).
    `raw_local_checkpoints`: see RAW_LOCAL_CONF (the config's `spark_conf` still wins).
    `light_jvm`: see replicator.spark.jvm. `driver_reads_all`: the driver reads every batch itself,
    so no batch's rows pass through the JVM (but for a batch the driver could not read): its
    heap starts small (replicator.spark.jvm) and, embedded, Spark generates no code for the
    batches' plans (NO_CODEGEN_CONF) and starts its Python processes without pyspark's daemon
    (NO_PYTHON_DAEMON_CONF), and the driver's pyarrow does without pandas
    (replicator.spark.arrow_without_pandas). `launched`: the JVM launched early for these same
    arguments (replicator.spark.early_jvm; it checks), waited for here. Under spark-submit, its
    JVM, master and Python settings are used: see `submitted_conf`."""
    numpy_check_without_pandas()
    accumulator_hangups_quiet()
    submitted = submitted_conf()
    if submitted is not None:  # the cluster's file systems: left as they are
        return _submitted_session(submitted, app_name, conf, quiet)
    args = SessionArgs(
        master=master,
        app_name=app_name,
        conf=dict(conf or {}),
        create_class_archive=create_class_archive,
        light_jvm=light_jvm,
        driver_reads_all=driver_reads_all,
        quiet=quiet,
        raw_local_checkpoints=raw_local_checkpoints,
    )
    if driver_reads_all and master.startswith("local"):
        pyarrow_without_pandas()
    if launched is not None:
        settings = launched.wait(args)
    else:
        settings = embedded_settings(args)
        launch_jvm(master, app_name, settings, quiet)
    settings = for_the_launched_jvm(settings, jvm_class_loads)
    from pyspark.sql import SparkSession

    from replicator.spark.datasource import NatsJetStreamDataSource

    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.get("spark.log.level", "WARN"))
    spark.dataSource.register(NatsJetStreamDataSource)
    return spark


def embedded_settings(args: SessionArgs) -> dict[str, str]:
    """The Spark settings of a session whose JVM this process launches (ours, then the
    config's), with the environment its JVM and Python workers inherit set to match."""
    master, conf, driver_reads_all = args.master, args.conf, args.driver_reads_all
    # Embedded, with every batch read by the driver: see NO_CODEGEN_CONF, NO_PYTHON_DAEMON_CONF.
    embedded_driver_reads_all = driver_reads_all and master.startswith("local")
    # Checkpoint files without a forked chmod each (replicator.spark.localfs), where it builds;
    # not in the JVM that dumps the class archive, which must not depend on the jar.
    local = master.startswith("local")
    jar = ready_jar() if local and not args.create_class_archive else None
    if jar is not None:
        add_to_launch_class_path(jar)
        conf = {**local_fs_conf(raw=args.raw_local_checkpoints), **conf}
    elif args.raw_local_checkpoints and local:
        conf = {**RAW_LOCAL_CONF, **conf}
    py = python_for_workers()
    # glibc gives each thread that allocates its own malloc arena (up to 8 per core), and the
    # JVM's ~60 threads touch many: 2 arenas took ~90 MB off the JVM's RSS (one-off run).
    # Set before the JVM starts, so it and every Python worker it starts inherit it.
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    # Embedded, the task workers make no pandas object unless pyspark's UDF profiler wraps the
    # sampled rules (replicator.spark.arrow_without_pandas): ~47 MB less in each.
    if local and not conf.get(UDF_PROFILER_CONF):
        os.environ[WORKERS_ENV] = "1"
    else:
        os.environ.pop(WORKERS_ENV, None)
    # In local mode the workers start through a script that lets them import the compiled
    # pyspark package rather than its zip (replicator.spark.pyworker): ~3x faster starts. The
    # planner steps of a query start and a stream's runner take the data source's interpreter,
    # PYSPARK_PYTHON, too.
    workers = worker_python(py) if master.startswith("local") else py
    os.environ["PYSPARK_PYTHON"] = workers
    os.environ["PYSPARK_DRIVER_PYTHON"] = NO_DATA_SOURCE_LOOKUP  # read by the JVM only
    from replicator.spark.jvm import driver_java_options

    merged = dict(DEFAULT_CONF)
    merged["spark.pyspark.python"] = workers
    merged["spark.executorEnv.PYSPARK_PYTHON"] = workers
    if not master.startswith("local"):
        # On a cluster the driver must be reachable from executors on other hosts.
        merged.pop("spark.driver.bindAddress")
        merged.pop("spark.driver.host")
    user = dict(conf)
    # Ours first: the JVM takes the last of repeated flags, so the user's options win.
    java_opts = [
        driver_java_options(args.create_class_archive, light=args.light_jvm, small_heap=driver_reads_all),
        f"-Dlog4j2.configurationFile={QUIET_LOG_CONFIG}" if args.quiet else "",
        user.pop("spark.driver.extraJavaOptions", ""),
    ]
    if embedded_driver_reads_all:
        merged.update(NO_CODEGEN_CONF)
        merged.update(NO_PYTHON_DAEMON_CONF)
    if args.quiet:
        merged["spark.log.level"] = "ERROR"
    merged["spark.driver.extraJavaOptions"] = " ".join(o for o in java_opts if o)
    merged.update(user)
    return merged


def submitted_conf() -> dict[str, str] | None:
    """The Spark settings spark-submit started this driver with (its master, --conf, the
    pyspark Python of a packed environment); None when not started by spark-submit (the JVM
    is then ours to launch)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf

    from replicator.spark.internals import connect_to_submitted_gateway

    connect_to_submitted_gateway()
    return dict(SparkConf().getAll())


def _submitted_session(
    submitted: dict[str, str], app_name: str, conf: dict[str, str] | None, quiet: bool
) -> SparkSession:
    """Ours < the config's `spark_conf` < spark-submit's: a default only where neither set it.
    JVM options and Python paths are spark-submit's (the JVM runs; executors use the archive's
    Python)."""
    from pyspark.sql import SparkSession

    from replicator.spark.datasource import NatsJetStreamDataSource

    link_packed_environment_for_the_driver()
    settings = {k: v for k, v in DEFAULT_CONF.items() if not k.startswith("spark.driver.")}
    settings.update(conf or {})
    builder = SparkSession.builder.appName(submitted.get("spark.app.name", app_name))
    for k, v in settings.items():
        if k not in submitted:
            builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if quiet:  # spark-submit's JVM logs with the cluster's log4j setup; from here, errors only
        spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(NatsJetStreamDataSource)
    return spark


def link_packed_environment_for_the_driver() -> None:
    """Spark runs a Python data source's planning in Python workers on the driver, with the
    same interpreter path as the executors' tasks: `spark.pyspark.python`, which with a packed
    environment is relative (./environment/bin/python) and exists only in the executors'
    directories. Where it is missing in the driver's directory, link it to this driver's own
    environment, which holds the same packages."""
    exec_path = os.environ.get("PYSPARK_PYTHON", "")
    parts = Path(exec_path).parts
    if not exec_path or Path(exec_path).is_absolute() or len(parts) < 2 or Path(exec_path).exists():
        return
    top = Path(parts[0] if parts[0] != "." else parts[1])
    if top.exists() or top.is_symlink():
        return  # the user's own: leave it alone
    top.symlink_to(sys.prefix, target_is_directory=True)
    log.info(
        "linked %s -> %s so that the driver's Python workers find %s", Path.cwd() / top, sys.prefix, exec_path
    )


_LAUNCH_LOCK = threading.Lock()


def launch_jvm(master: str, app_name: str, settings: dict[str, str], quiet: bool) -> None:
    """Start Spark's JVM in a session of its own, so that a stop signal sent to this process's
    whole group (a terminal's Ctrl-C, `kill -TERM -PGID`, systemd's KillMode=mixed) reaches
    this driver only, which stops the queries and then Spark, in order; a JVM and Python
    workers signalled at the same time died under it and printed tracebacks. They still end
    with this process, killed or not: PySpark's gateway exits when its stdin, a pipe from this
    process, closes, and Spark's Python daemons exit when the JVM does.
    Its console output comes back through a pipe and Python's logging (replicator.spark.jvm_log).
    Nothing to do where this process's JVM is already running."""
    from pyspark import SparkConf

    from replicator.spark.internals import gateway_started, launch_gateway
    from replicator.spark.jvm_log import forward_jvm_output

    # One launch at a time: a second (another run in this process, while an early launch is
    # still under way) waits for the first and then finds its JVM running.
    with _LAUNCH_LOCK:
        if gateway_started():
            return
        conf = SparkConf().setMaster(master).setAppName(app_name)
        for k, v in for_the_launch(settings).items():
            conf.set(k, v)
        # Our own pipe, read from before the JVM starts: what it prints when it fails to start is
        # the reason, and must reach the log too.
        read_end, write_end = os.pipe()
        forwarder = forward_jvm_output(os.fdopen(read_end, "rb"), quiet)
        try:
            popen_kwargs = {"start_new_session": True, "stdout": write_end, "stderr": subprocess.STDOUT}
            launch_gateway(conf, popen_kwargs)
        except Exception:
            os.close(write_end)
            forwarder.join(5)  # the JVM has exited: its last words are logged before the error
            raise
        os.close(write_end)  # the JVM holds its own copy: the pipe ends when it exits


@contextlib.contextmanager
def session_conf(spark: SparkSession, key: str, value: str | None) -> Iterator[None]:
    """`key` set to `value` (None: left as it is) while the block runs, then restored."""
    if value is None:
        yield
        return
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
