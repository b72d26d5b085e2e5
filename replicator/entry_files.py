"""Where a stream entry keeps its files: its directory under state_store, its Spark checkpoint,
the in-flight record, the stop and lease files. Paths only; nothing here reads or writes them."""

from __future__ import annotations

import re
from pathlib import Path

from replicator.config import Config, StreamConfig
from replicator.spark.checkpoint import CheckpointFiles


def entry_name(s: StreamConfig) -> str:
    """A stream entry's own directory, relative to state_store (and to checkpoint_store)."""
    name = f"{s.stream}_{s.name}"
    if s.leader_election_name and not s.sampling:
        # A hot standby's query and files are its own (instances may share state_store): a
        # copy entry that takes over continues from the target, not from a checkpoint.
        name += "/candidate_" + _candidate(s)
    return name


def _candidate(s: StreamConfig) -> str:
    """The entry's candidate name in its election, as a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", s.leader_election_name)


def entry_dir(cfg: Config, s: StreamConfig) -> Path:
    """A stream entry's directory under state_store: its control files, and its checkpoint
    unless checkpoint_store puts that elsewhere."""
    return Path(cfg.state_store) / entry_name(s)


def checkpoint_location(cfg: Config, s: StreamConfig) -> str:
    """Spark's checkpointLocation for a stream entry: a local path, or a Hadoop URI."""
    if cfg.checkpoint_store:
        return f"{cfg.checkpoint_store.rstrip('/')}/{entry_name(s)}/checkpoint"
    return str(entry_dir(cfg, s) / "checkpoint")


def crash_leftovers(checkpoint: CheckpointFiles) -> list[str]:
    """Spark's half-written offset and commit log files (`.<batch>.<uuid>.tmp`, renamed into
    place once written, and Hadoop's `..<batch>.<uuid>.tmp.crc` beside each) that a kill -9
    left behind. Spark never reads them, but a stateful query's first batch refuses to run
    while its offset log holds any file (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), so a kill
    during that batch's log write would stop the stream for good."""
    return [
        f"{log}/{name}"
        for log in ("offsets", "commits")
        for name in checkpoint.names(log)
        if name.startswith(".") and name.endswith((".tmp", ".tmp.crc"))
    ]


def inflight_path(cfg: Config, s: StreamConfig) -> Path:
    return entry_dir(cfg, s) / "inflight.json"


def unacked_path(cfg: Config, s: StreamConfig) -> Path:
    """What a sampled entry's failed publishes sent (replicator.spark.unacked)."""
    return entry_dir(cfg, s) / "unacked.json"


def live_mark_path(cfg: Config, s: StreamConfig) -> Path:
    return entry_dir(cfg, s) / "live-copied.json"


def stopping_path(cfg: Config, s: StreamConfig) -> Path:
    """While it exists the entry's query admits no new batch (it is stopping). This instance's
    own: a sampled entry's directory is shared by its election's candidates, and a stop another
    instance made as it stood by (or left behind when killed during it) planned nothing more in
    the leader's query, without an error, until that process restarted (the fault campaign,
    seed 37)."""
    if s.leader_election_name:
        return entry_dir(cfg, s) / f"stopping.{_candidate(s)}"
    return entry_dir(cfg, s) / "stopping"


def lease_path(cfg: Config, s: StreamConfig) -> Path:
    """A hot standby's query reads only while this file exists (ReaderOptions.lease_file)."""
    return entry_dir(cfg, s) / "leading.json"


def clock_due_path(cfg: Config, s: StreamConfig) -> Path:
    """When a sampled entry's clock next needs to move (replicator.spark.clock_due)."""
    return entry_dir(cfg, s) / "clock-due.json"
