"""Configuration in the Choria Stream Replicator's YAML format, validated with pydantic.

Every problem becomes one line that names the key and says how to fix it (`ConfigError`).
"""

from __future__ import annotations

import ipaddress
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from replicator.defaults import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_COPY_BATCH,
    DEFAULT_SAMPLING_BATCH,
    DEFAULT_SAMPLING_BUCKETS,
    default_sampling_partitions,
)
from replicator.durations import parse_duration
from replicator.election import election_key
from replicator.nats.tls import TLSFiles
from replicator.nats.wire import HEADER_NAME
from replicator.subjects import subject_problem
from replicator.yaml_files import read_yaml


class ConfigError(ValueError):
    """A configuration problem, as one line naming the key and the fix."""


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _tls_files(v: TLSFiles | None) -> TLSFiles | None:
    problem = v.problem() if v is not None else None
    if problem is not None:
        raise ValueError(problem)
    return v


# A `tls:` block: ca, cert and key files (replicator.nats.tls), checked as the config is read.
TLSConfig = Annotated[TLSFiles | None, AfterValidator(_tls_files)]


class AdvisoryConfig(_Strict):
    subject: str
    reliable: bool = False

    @field_validator("subject")
    @classmethod
    def _subject(cls, v: str) -> str:
        if problem := subject_problem(v):
            raise ValueError(
                f"{v!r} {problem}: give a NATS subject; %s is replaced by the event, %v by the value"
            )
        return v


_CHORIA_CREDENTIALS = (
    "Choria organisation credentials (seed_file, jwt_file, collective) are not supported: connect "
    "with the NATS URL's own auth (user:password@, ?credentials=FILE, ?nkey=FILE) and tls; remove the key"
)


def _refuse_choria(v: Any) -> Any:
    if v is not None:
        raise ValueError(_CHORIA_CREDENTIALS)
    return v


# A `choria:` block: the key is known (Choria's), its use refused with why.
ChoriaCredentials = Annotated[Any, BeforeValidator(_refuse_choria)]


def _header_names(headers: dict[str, str]) -> dict[str, str]:
    # nats-py's publish, which sends heartbeats, refuses any other name (once trimmed) at every
    # publish. Values need no check: it trims them and sends a line break as a space.
    for name in headers:
        if not HEADER_NAME.fullmatch(name.strip()):
            raise ValueError(
                f"{name!r} is not a header name: use ASCII letters, digits and - . _ (e.g. X-Origin), "
                "no spaces or ( ) , / : ; < = > ? @ [ ] { }"
            )
    return headers


# Headers heartbeats carry: names a publish would be refused for are refused as the config is read.
HeartbeatHeaders = Annotated[dict[str, str], AfterValidator(_header_names)]


class HeartbeatSubject(_Strict):
    """A subject heartbeats go to, with its own interval and headers (over the shared ones)."""

    subject: str
    interval: Duration | None = None
    headers: HeartbeatHeaders = Field(default_factory=dict)

    @field_validator("subject")
    @classmethod
    def _subject(cls, v: str) -> str:
        if problem := subject_problem(v):
            raise ValueError(f"{v!r} {problem}: give a NATS subject, e.g. choria.node_metadata._monitor")
        return v


class HeartbeatConfig(_Strict):
    """`heartbeats:` (Choria v0.8+): a timestamp published to each subject every interval, so
    end-to-end latency can be watched on an idle stream."""

    url: str
    interval: Duration = timedelta(seconds=10)
    leader_election: bool = False
    headers: HeartbeatHeaders = Field(default_factory=dict)
    subjects: list[HeartbeatSubject] = Field(min_length=1)
    tls: TLSConfig = None
    choria: ChoriaCredentials = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        from replicator.nats.urls import parse_nats_url

        parse_nats_url(v)
        return v

    @model_validator(mode="after")
    def _intervals(self) -> HeartbeatConfig:
        for d in [self.interval, *(s.interval for s in self.subjects if s.interval is not None)]:
            if d < timedelta(seconds=1):
                raise ValueError("heartbeat intervals must be at least 1s")
        return self


# Choria's order of the start keys when several are set: the first set is used.
START_PRECEDENCE = ("start_at_end", "start_sequence", "start_delta", "start_time")


class StreamConfig(_Strict):
    """One replicated stream (an entry of `streams:`)."""

    # Several start keys were set and one was kept (see notices).
    _start_notice: str = PrivateAttr(default="")

    name: str = ""
    stream: str
    source_url: str
    target_url: str
    target_stream: str = ""
    target_subject_prefix: str = ""
    target_subject_remove: str = ""
    filter_subject: str = ""
    start_sequence: StrictInt = Field(default=0, ge=0, le=2**64 - 1)
    start_time: datetime | None = None
    start_delta: Duration | None = None
    start_at_end: bool = False
    max_age: Duration | None = None
    no_target_create: bool = False
    tls: TLSConfig = None
    source_tls: TLSConfig = None
    target_tls: TLSConfig = None
    # Sampling and advisories (docs/configuration.md).
    inspect_field: str = ""
    inspect_header: str = ""
    inspect_subject_token: StrictInt = 0
    inspect_duration: Duration | None = None
    warn_duration: Duration | None = None
    size_trigger: float = Field(default=0, ge=0)
    inspect_force_field: str = ""
    advisory: AdvisoryConfig | None = None
    # Extension: `drop` forgets, unadvised, a sender whose expiry is found more than
    # inspect_duration late (after the replicator was down), as Choria's replicator does.
    late_expiry: Literal["advise", "drop"] = "advise"
    leader_election_name: str = ""
    # Choria keys (docs/configuration.md): `ephemeral: true` is refused (Go copies the stream
    # again from its start options at every start; this replicator copies each message once);
    # `target_initiated` reads further ahead, for a replicator near the target across a long link.
    ephemeral: bool = False
    target_initiated: bool = False
    choria: ChoriaCredentials = None
    source_choria: ChoriaCredentials = None
    target_choria: ChoriaCredentials = None
    # Extensions of this replicator (not in the Choria format).
    # Each copy names the sequence the one before it got (Nats-Expected-Last-Sequence): strict order in the target
    # even when a publish fails mid-batch. Off for targets others write to (found out anyway).
    chain_copies: bool = True
    # Rows per micro-batch while backlogged (defaults in replicator.options).
    batch_max_messages: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    # Message bytes per micro-batch while backlogged (rows capped by it over the mean size).
    batch_max_bytes: StrictInt = Field(default=DEFAULT_BATCH_BYTES, ge=1 << 20, le=1 << 30)
    # Senders are hashed into this many buckets of Spark state; fixed once a checkpoint exists.
    sampling_buckets: StrictInt = Field(default=DEFAULT_SAMPLING_BUCKETS, ge=1, le=4096)
    # Shuffle partitions of the sampled query (tasks that hold the buckets' state); fixed in the
    # checkpoint at its first batch. Default: one per 16 buckets.
    sampling_partitions: StrictInt | None = Field(default=None, ge=1, le=4096)
    # `stream`: copies in the source's order, published by the driver. `subject`: each subject's
    # copies in order, published by Spark's tasks in `lanes` (replicator.spark.lanes).
    order: Literal["stream", "subject"] = "stream"
    # Which copy batches the driver reads itself instead of Spark's read tasks (replicator.spark.
    # small_batches): `all`; `small` (up to 1,000 messages, a live stream's); `auto`: all while
    # Spark runs embedded (its tasks would run on this machine anyway), small on a cluster.
    driver_reads: Literal["auto", "small", "all"] = "auto"
    # Copy-only entries: the driver copies what the query would read first while Spark's
    # session starts (replicator.head_start), so the first copies do not wait for Spark.
    copy_ahead: bool = True
    # Copy-only entries that copy ahead: the driver also copies each new message as the source
    # stores it, beside the query (replicator.live_copies), whose batches then record progress.
    # Unset: on wherever it applies while Spark runs embedded (session_args.copies_live); `true`
    # is refused where it cannot apply; `false` leaves every copy to the query.
    copy_live: bool | None = None
    lanes: StrictInt = Field(default=4, ge=1, le=1024)

    @field_validator("stream", "target_stream")
    @classmethod
    def _stream_name(cls, v: str, info: ValidationInfo) -> str:
        if not v and info.field_name == "stream":
            raise ValueError("give the name of the source stream to copy")
        if v and not _NAME.match(v):
            raise ValueError(f"{v!r} is not a valid stream name (letters, digits, - and _ only)")
        return v

    @field_validator("filter_subject", "target_subject_prefix")
    @classmethod
    def _subject(cls, v: str, info: ValidationInfo) -> str:
        filtering = info.field_name == "filter_subject"
        if v and (problem := subject_problem(v, wildcards=filtering)):
            example = "NODE_DATA.> or NODE_DATA.*.facts" if filtering else "FLEET_NODES"
            raise ValueError(
                f"{v!r} {problem}: give a NATS subject{' filter' if filtering else ''}, e.g. {example}"
            )
        return v

    @field_validator("target_subject_remove")
    @classmethod
    def _removed(cls, v: str) -> str:
        if any(c.isspace() for c in v):
            raise ValueError(
                f"{v!r} holds whitespace, which no subject has: give the text to remove from subjects"
            )
        return v

    @field_validator("name")
    @classmethod
    def _config_name(cls, v: str) -> str:
        if v and " " in v:
            raise ValueError(f"{v!r} must not contain spaces (it goes in the Choria-SR-Source header)")
        return v

    @field_validator("source_url", "target_url")
    @classmethod
    def _url(cls, v: str) -> str:
        from replicator.nats.urls import parse_nats_url

        parse_nats_url(v)  # raises ValueError with the reason
        return v

    @field_validator("start_time", mode="before")
    @classmethod
    def _start_time(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"{v!r} is not an RFC3339 time, e.g. 2024-01-02T15:04:05Z") from None
        return v

    @field_validator("ephemeral")
    @classmethod
    def _ephemeral(cls, v: bool) -> bool:
        if v:
            raise ValueError(
                "true is not supported: Choria's replicator then copies the whole stream again from its "
                "start options at every start; this one copies each message once and resumes after the "
                "target's last copy, so the target always holds the stream: remove the key"
            )
        return v

    @field_validator("inspect_subject_token")
    @classmethod
    def _token(cls, v: int) -> int:
        if v < -1:
            raise ValueError("must be a 1-based token number, -1 for the whole subject, or 0 for off")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> StreamConfig:
        if self.start_time is not None and self.start_time.tzinfo is None:
            self.start_time = self.start_time.replace(tzinfo=UTC)
        starts = [
            k
            for k, on in (
                ("start_sequence", self.start_sequence > 0),
                ("start_time", self.start_time is not None),
                ("start_delta", self.start_delta is not None),
                ("start_at_end", self.start_at_end),
            )
            if on
        ]
        if len(starts) > 1 and not self._start_notice:  # (clearing the others validates again)
            # Choria's replicator takes the first of these in its order; a file it runs runs here.
            used = next(k for k in START_PRECEDENCE if k in starts)
            self._start_notice = (
                f"{', '.join(starts)} are all set: {used} is used, as Choria's replicator does (it takes "
                f"the first of {', '.join(START_PRECEDENCE)}); remove the others"
            )
            for k in starts:
                if k != used:
                    setattr(self, k, StreamConfig.model_fields[k].default)
        modes = [
            k
            for k, on in (
                ("inspect_field", bool(self.inspect_field)),
                ("inspect_header", bool(self.inspect_header)),
                ("inspect_subject_token", self.inspect_subject_token != 0),
            )
            if on
        ]
        if len(modes) > 1:
            raise ValueError(f"only one inspection mode can be set per stream, got {', '.join(modes)}")
        if modes and self.inspect_duration is None:
            raise ValueError(f"{modes[0]} needs inspect_duration (e.g. 1h): how often to copy each sender")
        if not modes:
            for key in ("inspect_duration", "warn_duration", "advisory", "inspect_force_field"):
                if getattr(self, key):
                    raise ValueError(
                        f"{key} needs an inspection mode: set inspect_field, inspect_header "
                        "or inspect_subject_token"
                    )
            if self.size_trigger:
                raise ValueError(
                    "size_trigger needs an inspection mode: set inspect_field, inspect_header or inspect_subject_token"
                )
        if self.inspect_duration is not None:
            if self.inspect_duration <= timedelta(0):
                raise ValueError("inspect_duration must be positive")
            if self.warn_duration is None:
                self.warn_duration = self.inspect_duration / 2
            elif self.warn_duration <= timedelta(0):
                raise ValueError(
                    "warn_duration must be more than 0 (every sender would be advised timeout at once): "
                    "give it, e.g. half of inspect_duration, or leave it out for that default"
                )
            elif self.warn_duration >= self.inspect_duration:
                raise ValueError("warn_duration must be shorter than inspect_duration")
        if self.order == "subject":
            unsupported = [
                k
                for k, on in (
                    ("sampling (inspect_*)", self.sampling),
                    ("leader_election_name", bool(self.leader_election_name)),
                    ("max_age", self.max_age is not None),
                )
                if on
            ]
            if unsupported:
                raise ValueError(
                    f"order: subject does not combine with {', '.join(unsupported)} yet: use order: stream "
                    "(the default) for this entry"
                )
        if self.copy_live is True:
            unsupported = [
                k
                for k, on in (
                    ("sampling (inspect_*)", self.sampling),
                    ("order: subject", self.order == "subject"),
                    ("leader_election_name", bool(self.leader_election_name)),
                    ("copy_ahead: false", not self.copy_ahead),
                )
                if on
            ]
            if unsupported:
                raise ValueError(
                    f"copy_live does not combine with {', '.join(unsupported)}: remove copy_live from this entry"
                )
        if self.batch_max_messages is None:
            self.batch_max_messages = DEFAULT_SAMPLING_BATCH if self.sampling else DEFAULT_COPY_BATCH
        if self.sampling_partitions is None:
            self.sampling_partitions = default_sampling_partitions(self.sampling_buckets)
        elif self.sampling_partitions > self.sampling_buckets:
            raise ValueError(
                f"sampling_partitions ({self.sampling_partitions}) must not exceed sampling_buckets "
                f"({self.sampling_buckets}): a partition without a bucket does nothing"
            )
        return self

    @property
    def sampling(self) -> bool:
        return bool(self.inspect_field or self.inspect_header or self.inspect_subject_token)

    def notices(self) -> list[str]:
        """What was accepted with a meaning worth a line in the log (cli: validate prints them,
        run logs them): which start key is used, and what Choria's replicator would refuse."""
        out = [self._start_notice] if self._start_notice else []
        if self.target_initiated:
            # Go's rules for target_initiated; ours only reads further ahead, so they do not apply.
            beyond = [k for k, on in (("without filter_subject", not self.filter_subject),
                                      ("with max_age", self.max_age is not None),
                                      ("with sampling", self.sampling)) if on]  # fmt: skip
            if beyond:
                out.append(
                    f"target_initiated {' and '.join(beyond)}: accepted here (it only reads further ahead), "
                    "but Choria's replicator refuses this entry"
                )
        return out


class Config(_Strict):
    """The whole file."""

    name: str
    # Empty only in a file that just sends heartbeats (as Choria's runs it).
    streams: list[StreamConfig] = Field(default_factory=list)
    state_store: str = ""
    # Extension: where Spark checkpoints go instead of state_store, as a Hadoop URI
    # (s3a://bucket/prefix): reached by every executor of a Spark cluster (replicator.spark.checkpoint).
    checkpoint_store: str = ""
    monitor_port: StrictInt = Field(default=0, ge=0, le=65535)
    # Extension: the address monitor_port listens on (0.0.0.0: every interface, as Choria's).
    monitor_address: str = "0.0.0.0"
    loglevel: Literal["debug", "info", "warn", "warning", "error"] = "info"
    logfile: str = ""
    # Extension: one JSON object a line for log shippers.
    log_format: Literal["text", "json"] = "text"
    tls: TLSConfig = None
    heartbeats: HeartbeatConfig | None = None
    # Go's pprof endpoints; here: Spark's web UI (port 4040 and up) for the jobs and their timings.
    profiling: bool = False
    choria: ChoriaCredentials = None
    # Extensions: where the Spark job runs, and extra Spark settings.
    spark_master: str = "local[*]"
    spark_conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("spark_master")
    @classmethod
    def _spark_master(cls, v: str) -> str:
        problem = spark_master_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("spark_conf")
    @classmethod
    def _spark_conf_master(cls, v: dict[str, str]) -> dict[str, str]:
        problem = spark_master_problem(v["spark.master"]) if "spark.master" in v else None
        if problem:
            raise ValueError(f"spark.master: {problem}")
        return v

    @field_validator("monitor_address")
    @classmethod
    def _monitor_address(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(
                f"{v!r} is not an IP address: use 127.0.0.1 for this host only, 0.0.0.0 for every "
                "interface, or one of its addresses"
            ) from None
        return v

    @field_validator("checkpoint_store")
    @classmethod
    def _checkpoint_store(cls, v: str) -> str:
        if not v:
            return v
        from replicator.spark.checkpoint import is_uri

        scheme = v.split("://", 1)[0]
        if not is_uri(v):
            raise ValueError(
                f"{v!r} is not a URI: give one Spark can write to (s3a://bucket/prefix, "
                "hdfs://namenode/dir, file:///dir), or leave it out to keep checkpoints under state_store"
            )
        if scheme in ("s3", "s3n"):
            raise ValueError(
                f"{v!r}: Spark reaches S3 through Hadoop's s3a connector: write s3a://{v.split('://', 1)[1]}"
            )
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or " " in v:
            raise ValueError("must be a non-empty name without spaces, e.g. dc1_replicator")
        return v

    def notices(self) -> list[str]:
        """Lines about keys accepted with a meaning worth saying (see StreamConfig._notices)."""
        return [f"streams[{i}].{n}" for i, s in enumerate(self.streams) for n in s.notices()]

    @model_validator(mode="after")
    def _defaults(self) -> Config:
        if not self.streams and self.heartbeats is None:
            raise ValueError(
                "streams: give one or more stream entries (or heartbeats: for a file that only sends heartbeats)"
            )
        seen: set[tuple[str, str]] = set()
        elections: dict[str, str] = {}  # leader election key -> the entry using it
        for s in self.streams:
            if not s.name:
                s.name = self.name
            if not s.target_stream:
                s.target_stream = s.stream
            if s.tls is None:
                s.tls = self.tls
            if s.source_tls is None:
                s.source_tls = s.tls
            if s.target_tls is None:
                s.target_tls = s.tls
            if _copies_into_itself(s):
                raise ValueError(
                    f"entry {s.name!r} would copy stream {s.stream!r} into itself (the same source_url and "
                    "target_url, TLS and target_stream, and its copies keep their subjects): point target_url "
                    "at the other cluster, or set target_stream to another stream"
                )
            key = (s.stream, s.name)
            if key in seen:
                raise ValueError(
                    f"duplicate stream configuration name {s.name!r} for stream {s.stream!r}: "
                    "give each entry its own name"
                )
            seen.add(key)
            if s.leader_election_name:
                ekey = election_key(s.name, s.stream)
                if ekey in elections:
                    raise ValueError(
                        f"entries {elections[ekey]} and {s.name!r} (stream {s.stream!r}) would campaign on "
                        f"the same leader election key {ekey!r}: rename one of them"
                    )
                elections[ekey] = f"{s.name!r} (stream {s.stream!r})"
        return self

    def stream_named(self, name: str) -> StreamConfig:
        for s in self.streams:
            if name in (s.name, s.stream):
                return s
        known = ", ".join(sorted({s.name for s in self.streams}))
        raise ConfigError(f"--stream {name!r} is not configured: choose one of {known}")


def _copies_into_itself(s: StreamConfig) -> bool:
    """Whether an entry's copies land in the stream it reads, where it would read them again: the
    same URL (and so the same user) and TLS (a certificate may map another account), the same
    stream, and subjects left as they are (a prefix may put the copies outside what it reads)."""
    return (
        s.target_stream == s.stream
        and s.target_url.strip() == s.source_url.strip()
        and s.target_tls == s.source_tls
        and not s.target_subject_prefix
        and not s.target_subject_remove
    )


# The master URLs Spark takes (SparkSubmit, then SparkContext's task scheduler): anything else
# failed only once the JVM was launched, as a Java stack in the log. Not Spark's own test master
# local-cluster[...]: never tried here, it would get the embedded settings (the master starts
# with "local") while its executors are JVMs of their own.
_SPARK_MASTER = re.compile(
    r"local|local\[(?P<threads>\*|0*[1-9][0-9]*)(\s*,\s*(?P<failures>[0-9]+))?\]|spark://\S+|yarn|k8s://\S+"
)


_JAVA_INT_MAX = 2**31 - 1  # local[N,F]'s numbers are read as Java ints


def spark_master_problem(master: str) -> str | None:
    """Why Spark would refuse `master` as its master URL, or None.

    >>> spark_master_problem("local[*]"), spark_master_problem("spark://h:7077") is None
    (None, True)
    """
    m = _SPARK_MASTER.fullmatch(master)
    if m:
        threads, failures = m["threads"], m["failures"]
        if threads and threads != "*" and int(threads) > _JAVA_INT_MAX:
            return (
                f"{master!r}: Spark takes at most {_JAVA_INT_MAX} threads: use local[*] (every core) or fewer"
            )
        if failures and int(failures) > _JAVA_INT_MAX:
            return (
                f"{master!r}: Spark takes at most {_JAVA_INT_MAX} task failures: give a smaller second number"
            )
        return None
    return (
        f"{master!r} is not a Spark master URL: use local[*] (embedded, every core), local[N], "
        "spark://host:7077, yarn or k8s://https://host:port"
    )


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        # A key the user wrote may hold a newline or spaces: quoted, the error stays one line.
        name = part if part.isprintable() and not any(c.isspace() for c in part) else json.dumps(part)
        out += f".{name}" if out else name
    return out


def _shown(value: Any) -> str:
    """A value the user wrote, on one short line."""
    text = value if isinstance(value, str) else str(value)
    text = text if len(text) <= 24 else text[:20] + "..."
    return json.dumps(text) if isinstance(value, str) else text


def _number(value: Any) -> str:
    """A bound as it would be written: 0, not pydantic's 0.0 for a float key's `ge=0`."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _int_hint(value: Any) -> str:
    # Integers are strict (as Go's JSON decoding of Choria's config is): say what to write instead.
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        return f"expected an integer, got the string {_shown(value)}: write it without quotes"
    if isinstance(value, bool):
        return f"expected an integer, got {str(value).lower()}: write a number"
    return "expected an integer: write a whole number"


# A number out of its key's range: pydantic's error type -> (its bound in the error's context,
# what to write instead).
_BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
}


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    where = _location(first["loc"]) or "config"
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        msg = "unknown key: remove it or check its spelling against the Choria Stream Replicator keys"
    elif first["type"] == "missing":
        msg = "is required"
    elif first["type"] == "int_type":
        msg = _int_hint(first.get("input"))
    elif first["type"] in _BOUNDS and _BOUNDS[first["type"]][0] in first.get("ctx", {}):
        bound, write = _BOUNDS[first["type"]]
        msg = f"{_shown(first.get('input'))} is out of range: write a number {write} {_number(first['ctx'][bound])}"
    more = len(err.errors()) - 1
    return f"{where}: {msg}" + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")


def parse_config(data: Any, base_dir: Path | None = None) -> Config:
    if not isinstance(data, dict):
        raise ConfigError("config: expected a YAML mapping with name and streams at the top level")
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_one_line(e)) from None
    if not cfg.state_store:
        cfg.state_store = str((base_dir or Path.cwd()) / "state")
    return cfg


def load_config(path: str | Path) -> Config:
    p = Path(path)
    try:
        data = read_yaml(p, "config file")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return parse_config(data, base_dir=p.resolve().parent)
