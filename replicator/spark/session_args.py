"""What Spark session a set of configured streams needs: `build_session`'s arguments, worked out
from the config alone (no servers, no Spark), so that the JVM can be launched with them before
the rest of the replicator has even been imported (replicator.spark.early_jvm)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from replicator.config import Config, StreamConfig
from replicator.options import ReaderOptions


def resolve_master(cfg: Config, spark_master: str | None) -> str:
    """A spark.master in spark_conf wins over both when the session starts (the user's settings
    come last), so every choice made from the master is made from that one."""
    return cfg.spark_conf.get("spark.master") or spark_master or cfg.spark_master


def driver_read_limit(s: StreamConfig, master: str) -> int:
    """The largest copy batch (in messages) the driver reads itself (config driver_reads).
    Embedded, Spark's read tasks run on this machine too, and handing their rows through the JVM
    to this process cost more than the reading (`make bench`, docs/performance.md); on a cluster
    they read in parallel on other machines."""
    small = ReaderOptions.min_partition_messages
    mode = s.driver_reads
    if mode == "auto":
        mode = "all" if master.startswith("local") else "small"
    return int(s.batch_max_messages or small) if mode == "all" else small


def copies_live(s: StreamConfig, master: str) -> bool:
    """Whether a copy-only entry that copies ahead also copies live (config copy_live). Unset:
    while Spark runs embedded; on a cluster its executors read a backlog in parallel, and live
    copies would bring it all through the driver."""
    return s.copy_live if s.copy_live is not None else master.startswith("local")


def reads_through_spark(s: StreamConfig, master: str) -> bool:
    """Whether an entry's batches go through Spark's Python task workers (else the driver reads
    every batch itself, and starting those workers would only cost memory)."""
    if s.sampling or s.order == "subject":
        return True
    return driver_read_limit(s, master) < int(s.batch_max_messages or 0)


def raw_local_checkpoints(cfg: Config, streams: list[StreamConfig]) -> bool:
    """Checkpoints on local disk without Hadoop's .crc files (replicator.spark.session, which
    also keeps them for a Spark cluster): only for queries that keep no state, with local
    checkpoints (with s3a:// and the like Hadoop buffers through the checksummed file system)."""
    local = not cfg.checkpoint_store or cfg.checkpoint_store.startswith("file:")
    return local and not any(s.sampling for s in streams)


@dataclass(frozen=True)
class SessionArgs:
    """`build_session`'s arguments (see there for each)."""

    master: str = "local[*]"
    app_name: str = "stream-replicator"
    conf: dict[str, str] = field(default_factory=dict)
    create_class_archive: bool = False
    light_jvm: bool = True
    driver_reads_all: bool = False
    quiet: bool = True
    raw_local_checkpoints: bool = False

    def kwargs(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def session_args(
    cfg: Config, streams: list[StreamConfig], master: str, create_class_archive: bool = False
) -> SessionArgs:
    """The session a run of `streams` starts (`master` from resolve_master)."""
    conf = dict(cfg.spark_conf)
    if cfg.profiling:
        conf.setdefault("spark.ui.enabled", "true")  # jobs, stages and their timings
    return SessionArgs(
        master=master,
        app_name=f"stream-replicator-{cfg.name}",
        conf=conf,
        create_class_archive=create_class_archive,
        # Sampling makes the JVM shuffle and keep state (replicator.spark.jvm).
        light_jvm=not any(s.sampling for s in streams),
        # Embedded, the driver reads every batch itself: rows pass through the JVM only in a
        # batch it could not read (then Spark reads it, without generated code: only slower).
        driver_reads_all=not any(reads_through_spark(s, master) for s in streams),
        quiet=cfg.loglevel != "debug",
        raw_local_checkpoints=raw_local_checkpoints(cfg, streams),
    )
