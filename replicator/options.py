"""What the `nats-jetstream` source reads and how: one typed, frozen object with its defaults.

The replicator builds it from a stream's config (`replicator.replication`); Spark carries it to
the planner and the read tasks as string options, converted here both ways and nowhere else;
the data source, its read tasks and the in-flight catch-up all take the object. Kept free of
pydantic and pyarrow: Spark's planner processes import it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from replicator.defaults import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_COPY_BATCH,
    DEFAULT_FIRST_BATCH,
    DEFAULT_SAMPLING_BUCKETS,
)
from replicator.nats.tls import TLSFiles
from replicator.sampling.extract import SenderExtractor

if TYPE_CHECKING:
    from replicator.config import StreamConfig


@dataclass(frozen=True)
class SamplingOptions:
    """Sampling mode: rows also carry sender, force, bucket and size, and every batch carries
    the event-time clock (see replicator.spark.datasource)."""

    inspect_field: str = ""
    inspect_header: str = ""
    inspect_subject_token: int = 0
    inspect_force_field: str = ""
    sampling_buckets: int = DEFAULT_SAMPLING_BUCKETS
    # While caught up and without messages, a batch moves the clock when the sink's file says a
    # sender's timeout or expiry is due (replicator.spark.clock_due), and at least every
    # clock_max_idle_ms; without a file it can match, every clock_interval_ms.
    clock_interval_ms: int = 1_000
    clock_due_file: str = ""
    clock_max_idle_ms: int = 60_000

    def __post_init__(self) -> None:
        if not (self.inspect_field or self.inspect_header or self.inspect_subject_token):
            raise ValueError(
                "nats-jetstream: sampling needs inspect_field, inspect_header or inspect_subject_token"
            )
        _at_least(self, "sampling_buckets", 1)
        _at_least(self, "clock_interval_ms", 1)
        _at_least(self, "clock_max_idle_ms", 1)

    @classmethod
    def from_config(cls, s: StreamConfig, clock_due_file: str = "") -> SamplingOptions:
        return cls(
            s.inspect_field, s.inspect_header, s.inspect_subject_token, s.inspect_force_field,
            sampling_buckets=s.sampling_buckets, clock_due_file=clock_due_file,
        )  # fmt: skip

    def extractor(self) -> SenderExtractor:
        return SenderExtractor(
            self.inspect_field, self.inspect_header, self.inspect_subject_token, self.inspect_force_field
        )


@dataclass(frozen=True)
class ReaderOptions:
    url: str
    stream: str
    filter_subject: str = ""
    # Where a new query starts (at most one is set); never below min_start_sequence, which the
    # replicator sets to 1 + the last source sequence the target already holds.
    start_sequence: int = 0
    start_time: datetime | None = None
    start_at_end: bool = False
    min_start_sequence: int = 0
    # Admission control: batches start at first_batch_messages and double while full, up to
    # max_messages_per_batch, so the first copy does not wait for a full-size batch.
    max_messages_per_batch: int = DEFAULT_COPY_BATCH
    first_batch_messages: int = DEFAULT_FIRST_BATCH
    max_bytes_per_batch: int = DEFAULT_BATCH_BYTES
    # Contiguous sequence ranges read in parallel per batch, each at least this long (1,000:
    # the first 2,000-row batch already starts both read workers).
    parallelism: int = 2
    min_partition_messages: int = 1_000
    # A read task hands Spark one Arrow batch per chunk: its memory is bounded by these.
    chunk_messages: int = 5_000
    chunk_bytes: int = 16 * 1024 * 1024
    tls: TLSFiles | None = None
    sampling: SamplingOptions | None = None
    # While this file exists the source admits no new data, so the running batch is the last
    # one: how the replicator stops a query without interrupting a batch.
    stop_file: str = ""
    # The query's first offset (JSON) as the replicator chose it and keeps it in the checkpoint
    # (StreamReplication._initial_offset); without it each initialOffset() chooses anew.
    initial_offset: str = ""
    # Leader-elected copy entries (a hot standby): while this file is absent the source admits
    # nothing, so a standby's query runs idle and ready; the leader writes {"after": N} into
    # it (N: the target's last copy), and reading continues after N.
    lease_file: str = ""
    # The source stream's creation (µs since the epoch) the query reads: a plan that finds the
    # stream created at another time (deleted and created again) fails, rather than read the
    # new stream on from the old one's offset (0: not checked).
    source_created_us: int = 0

    def __post_init__(self) -> None:
        for name in ("url", "stream"):
            if not getattr(self, name):
                raise ValueError(f"nats-jetstream: option {name!r} is required")
        for name in ("max_messages_per_batch", "first_batch_messages", "max_bytes_per_batch", "parallelism",
                     "min_partition_messages", "chunk_messages", "chunk_bytes"):  # fmt: skip
            _at_least(self, name, 1)
        if self.start_time is not None and self.start_time.tzinfo is None:
            raise ValueError("nats-jetstream: start_time needs a time zone, e.g. 2024-01-02T15:04:05Z")

    @classmethod
    def from_config(
        cls,
        s: StreamConfig,
        min_start_sequence: int = 0,
        start_time: datetime | None = None,
        stop_file: str = "",
        lease_file: str = "",
        clock_due_file: str = "",
        source_created_us: int = 0,
    ) -> ReaderOptions:
        """A stream entry's options. `start_time`: where a new copy starts when the entry sets
        `start_time` or `start_delta` (resolved by the caller, once, at start)."""
        assert s.batch_max_messages is not None  # the config fills it in
        tls = s.source_tls
        sampling = SamplingOptions.from_config(s, clock_due_file) if s.sampling else None
        return cls(
            url=s.source_url,
            stream=s.stream,
            filter_subject=s.filter_subject,
            start_sequence=s.start_sequence,  # at most one start is set (the config checks)
            start_time=start_time,
            start_at_end=s.start_at_end,
            min_start_sequence=min_start_sequence,
            max_messages_per_batch=s.batch_max_messages,
            max_bytes_per_batch=s.batch_max_bytes,
            # A sampled batch pays a fixed state rewrite and its first batch is slow anyway (the
            # stateful operator's start): full-size batches from the start. The copies' ramp
            # for it brought the first sampled copy at most 1.7 s sooner and made `make demo`
            # 3-6 s longer (docs/performance.md, 2026-12-01).
            first_batch_messages=s.batch_max_messages if s.sampling else DEFAULT_FIRST_BATCH,
            tls=tls if tls is not None and tls.enabled else None,
            sampling=sampling,
            # target_initiated (Choria's mode for a replicator placed near the target): the
            # source is across a long link, so each read request asks for four times as much.
            chunk_messages=cls.chunk_messages * (4 if s.target_initiated else 1),
            chunk_bytes=cls.chunk_bytes * (4 if s.target_initiated else 1),
            stop_file=stop_file,
            lease_file=lease_file,
            source_created_us=source_created_us,
        )

    def to_spark(self) -> dict[str, str]:
        """Spark's string options (a default is left out: from_spark gives it back)."""
        out: dict[str, str] = {}
        for obj in (self, self.tls, self.sampling):
            if obj is None:
                continue
            prefix = "tls_" if isinstance(obj, TLSFiles) else ""
            for f in dataclasses.fields(obj):
                value = getattr(obj, f.name)
                if f.name in ("tls", "sampling") or value == f.default:
                    continue
                out[prefix + f.name] = _to_text(value)
        if self.sampling is not None:
            out["sampling"] = "true"
        return out

    @classmethod
    def from_spark(cls, options: Mapping[str, str]) -> ReaderOptions:
        """Parse Spark's string options; an unknown or malformed one is a ValueError naming it."""
        given = {str(k).lower(): v for k, v in options.items()}
        known = _spark_names()
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(
                f"nats-jetstream: unknown option {unknown[0]!r}; known options: {', '.join(sorted(known))}"
            )
        parts: dict[type, dict[str, Any]] = {cls: {}, TLSFiles: {}, SamplingOptions: {}}
        for key, text in given.items():
            owner, name, kind = known[key]
            if owner is None:
                continue  # `sampling`, the switch
            try:
                parts[owner][name] = _from_text(text, kind)
            except ValueError:
                raise ValueError(f"nats-jetstream: option {key}={text!r} is not a valid {kind}") from None
        top = parts[cls]
        for name in ("url", "stream"):
            top.setdefault(name, "")  # a missing one is refused by __post_init__, by name
        if any(parts[TLSFiles].values()):
            top["tls"] = TLSFiles(**parts[TLSFiles])
        if _from_text(given.get("sampling", "false"), "bool") or parts[SamplingOptions]:
            top["sampling"] = SamplingOptions(**parts[SamplingOptions])
        return cls(**top)


def _at_least(obj: object, name: str, low: int) -> None:
    if getattr(obj, name) < low:
        raise ValueError(f"nats-jetstream: {name} must be at least {low}, got {getattr(obj, name)}")


def _to_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _from_text(text: str, kind: str) -> object:
    if kind == "bool":
        low = str(text).strip().lower()
        if low in ("1", "true", "yes"):
            return True
        if low in ("", "0", "false", "no"):
            return False
        raise ValueError(text)
    if kind == "int":
        return int(text or 0)
    if kind == "datetime":
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    return str(text)


def _spark_names() -> dict[str, tuple[type | None, str, str]]:
    """Spark option name -> (dataclass, field, kind)."""
    names: dict[str, tuple[type | None, str, str]] = {"sampling": (None, "sampling", "bool")}
    for owner, prefix in ((ReaderOptions, ""), (TLSFiles, "tls_"), (SamplingOptions, "")):
        hints = typing.get_type_hints(owner)
        for f in dataclasses.fields(owner):
            if f.name in ("tls", "sampling"):
                continue
            hint = hints[f.name]
            kind = next(
                (k for t, k in ((bool, "bool"), (int, "int"), (datetime, "datetime")) if _is(hint, t)),
                "str",
            )
            names[prefix + f.name] = (owner, f.name, kind)
    return names


def _is(hint: Any, t: type) -> bool:
    return hint is t or t in typing.get_args(hint)
