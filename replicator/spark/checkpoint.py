"""Where a stream's Spark checkpoint lives, and the few files in it the replicator reads itself.

By default a checkpoint is a directory under state_store, read as local files. With
`checkpoint_store` (a Hadoop URI: s3a://bucket/prefix, hdfs://..., file:///dir) it lives where
that names, so every executor of a Spark cluster, and a driver started on another host, reach
the same offsets and sampling state. The replicator then reads and writes its files through the
JVM's Hadoop FileSystem: the connector and credentials Spark itself writes the checkpoint with.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

# A sampled entry's bucket count, kept in its checkpoint: a sender's table is in bucket
# crc32(sender) % sampling_buckets, so with another count each sender would be looked up in a
# bucket that does not hold it (advised new and copied again, its old entry advised timeout).
SAMPLING_FILE = "sr-sampling.json"
# The source stream's creation a checkpoint was made reading: a stream deleted and created again
# numbers its messages from 1 anew, and a query resumed at the old offset would skip them.
SOURCE_FILE = "sr-source.json"
# The query's first offset as the replicator chose it (replicator.replication): inside the
# checkpoint, so removing the checkpoint (to copy again) removes it too.
INITIAL_OFFSET_FILE = "sr-initial-offset.json"


def is_uri(location: str) -> bool:
    return bool(_URI.match(location))


class CheckpointFiles(Protocol):
    """Files inside one checkpoint, named relative to it ("offsets/7")."""

    location: str  # what Spark's checkpointLocation option is given

    def read_text(self, name: str) -> str | None:
        """The file's text, None if there is no such file."""
        ...

    def write_text(self, name: str, text: str) -> None:
        """Replace the file whole: a reader sees the old text, or none, or all of the new."""
        ...

    def names(self, directory: str) -> list[str]:
        """The names of the files in a directory, [] if it does not exist."""
        ...

    def exists(self, name: str) -> bool:
        """Whether the checkpoint holds a file or directory of that name."""
        ...

    def delete(self, name: str) -> None: ...


class LocalCheckpoint:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)

    def read_text(self, name: str) -> str | None:
        try:
            return (self.root / name).read_text()
        except FileNotFoundError:
            return None

    def write_text(self, name: str, text: str) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp")
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def names(self, directory: str) -> list[str]:
        d = self.root / directory
        return sorted(p.name for p in d.iterdir() if p.is_file()) if d.is_dir() else []

    def exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)


class HadoopCheckpoint:
    """Through the driver JVM's Hadoop FileSystem (replicator.spark.internals), with the
    session's Hadoop configuration: spark.hadoop.* settings (fs.s3a.*) apply here as they do
    to Spark."""

    def __init__(self, spark: SparkSession, uri: str) -> None:
        from replicator.spark.internals import HadoopFileSystem

        self.location = uri.rstrip("/")
        self._hadoop = HadoopFileSystem(spark, self.location)
        self._fs: Any = self._hadoop.fs

    def _path(self, name: str) -> Any:
        return self._hadoop.path(f"{self.location}/{name}" if name else self.location)

    def read_text(self, name: str) -> str | None:
        path = self._path(name)
        if not self._fs.exists(path):
            return None
        return self._hadoop.read_utf8(path)

    def write_text(self, name: str, text: str) -> None:
        # Written beside and renamed into place: an object store's rename is a copy, but of a
        # complete file, so a reader still never sees half of one.
        path, tmp = self._path(name), self._path(f"{name}.tmp")
        out = self._fs.create(tmp, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        self._fs.delete(path, False)
        if not self._fs.rename(tmp, path):
            raise OSError(f"could not rename {tmp} to {path}")

    def names(self, directory: str) -> list[str]:
        path = self._path(directory)
        if not self._fs.exists(path):
            return []
        return sorted(str(s.getPath().getName()) for s in self._fs.listStatus(path) if s.isFile())

    def exists(self, name: str) -> bool:
        return bool(self._fs.exists(self._path(name)))

    def delete(self, name: str) -> None:
        self._fs.delete(self._path(name), False)


def open_checkpoint(location: str, spark: SparkSession | None) -> CheckpointFiles:
    """A checkpoint's files: a Hadoop URI goes through the session's JVM, a path is local."""
    if not is_uri(location):
        return LocalCheckpoint(Path(location))
    if spark is None:
        raise RuntimeError(f"checkpoint {location} is a URI: it is read through a Spark session")
    return HadoopCheckpoint(spark, location)


def has_commit(files: CheckpointFiles) -> bool:
    """Whether the checkpoint's commit log holds a batch (not only a file being written)."""
    return any(name.isdigit() for name in files.names("commits"))


def committed_end(files: CheckpointFiles) -> int | None:
    """The next source sequence after the last batch the checkpoint's commit log holds (the
    `seq` of that batch's offset log entry), or None: no batch committed, or its entry not in
    the form replicator.spark.datasource writes."""
    from replicator.spark.internals import offset_log_source_offset

    batches = [int(name) for name in files.names("commits") if name.isdigit()]
    if not batches:
        return None
    offset = offset_log_source_offset(files.read_text(f"offsets/{max(batches)}"))
    seq = offset.get("seq") if offset is not None else None
    return seq if isinstance(seq, int) else None


class CheckpointMismatch(RuntimeError):
    """The config asks for what the checkpoint cannot give (see keep_sampling_buckets)."""


def _recorded_int(
    files: CheckpointFiles, name: str, text: str, key: str, least: int | None, says: str, fix: str
) -> int:
    """The whole number `key` of a record the checkpoint keeps (`text`, read from `name`), or
    a refusal naming the file, what it should say and how to write it."""
    try:
        kept = json.loads(text)[key]
        if not isinstance(kept, int) or isinstance(kept, bool) or (least is not None and kept < least):
            raise TypeError(kept)
    except (ValueError, KeyError, TypeError):
        raise CheckpointMismatch(
            f"{files.location}/{name} does not say {says} ({text[:60]!r}): {fix}"
        ) from None
    return kept


def keep_sampling_buckets(files: CheckpointFiles, buckets: int) -> str | None:
    """Record the bucket count a sampled checkpoint is made with, or refuse another once a batch
    committed (before, its state is empty: the count can still change). Returns a warning when a
    checkpoint with batches but no record (made before the count was recorded) is taken to have
    the config's count, which was always documented as fixed once a checkpoint exists."""
    committed = has_commit(files)
    text = files.read_text(SAMPLING_FILE)
    if text is None or not committed:
        if text != json.dumps({"sampling_buckets": buckets}):
            files.write_text(SAMPLING_FILE, json.dumps({"sampling_buckets": buckets}))
        if text is None and committed:
            return (
                f"the checkpoint {files.location} does not say how many buckets its senders are in "
                f"(made by an earlier release): taken to be sampling_buckets ({buckets}), as configured"
            )
        return None
    kept = _recorded_int(
        files,
        SAMPLING_FILE,
        text,
        "sampling_buckets",
        1,
        "how many buckets the checkpoint holds",
        'write {"sampling_buckets": N} there, N as the checkpoint was made',
    )
    if kept != buckets:
        raise CheckpointMismatch(
            f"sampling_buckets is {buckets} but the checkpoint {files.location} keeps its senders in "
            f"{kept} buckets: set sampling_buckets: {kept} (or remove the checkpoint to sample afresh, "
            f"every sender advised new)"
        )
    return None


def keep_source_identity(files: CheckpointFiles, stream: str, created_us: int) -> None:
    """Record which incarnation of the source stream (its creation, µs) a checkpoint reads, or
    refuse another once the checkpoint holds anything of the stream's (an offset, or the first
    offset chosen, which copies made ahead of a query that never committed also set): resumed
    at the old stream's offset, a query would skip the new stream's first messages. A
    checkpoint made before this record is taken to be the current stream's; an unknown
    creation (0) is not checked. A stream restored from a backup of the same messages has a new
    creation too: the refusal says how to record it."""
    if not created_us:
        return
    doc = json.dumps({"source_created_us": created_us})
    text = files.read_text(SOURCE_FILE)
    holds = files.names("offsets") or files.exists(INITIAL_OFFSET_FILE)
    if text is None or not holds:
        if text is None or text.strip() != doc:
            files.write_text(SOURCE_FILE, doc)
        return
    kept = _recorded_int(
        files,
        SOURCE_FILE,
        text,
        "source_created_us",
        None,
        "which source stream the checkpoint reads",
        f"write {doc} there if it is this stream's checkpoint",
    )
    if kept != created_us:
        raise CheckpointMismatch(
            f"the source stream {stream} was deleted and created again since the checkpoint "
            f"{files.location} was made (created at {created_us} µs, the checkpoint's at {kept}): "
            "its messages are numbered anew and resuming would skip its first ones; remove the "
            f"checkpoint to copy it from its start (if the stream was restored from a backup of the "
            f"same messages, write {doc} into {SOURCE_FILE} there instead)"
        )
