"""Prometheus metrics, named like the Choria Stream Replicator's where the meaning matches
(`choria_stream_replicator_replicator_*`, labels stream/replicator/worker), exported as the Go
original exports them: its counters without the `_total` the Python client adds (so Choria's
dashboards and alerts work unchanged, see exposition), no `_created` series, its summaries as
summaries. Metrics of our own keep the Python client's conventions."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Summary,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

LABELS = ("stream", "replicator", "worker")
M = TypeVar("M", Counter, Gauge, Histogram, Summary)
_NS = "choria_stream_replicator_replicator"
# The steps of a micro-batch Spark times (StreamingQueryProgress.durationMs).
BATCH_STEPS = (
    "latestOffset",
    "walCommit",
    "queryPlanning",
    "getBatch",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)
# The Go original's limiter label: its only limiter keeps its state in memory; ours in Spark's
# state store, but a dashboard filtering on the label finds the series.
LIMITER = "memory"

# One series per counter (Go's name), not a second `_created` one per series.
disable_created_metrics()


class PerMessageTime(Collector):
    """Go's `processing_time_seconds`: a summary of the time spent per message. Ours handles a
    batch at a time, so each batch adds its messages to the count and its seconds to the sum:
    sum/count is the time per message, as in Go, and the rate of the sum the share of time busy."""

    def __init__(self, name: str, doc: str, registry: CollectorRegistry) -> None:
        self.name, self.doc = name, doc
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, ...], tuple[int, float]] = {}
        registry.register(self)

    def observe(self, labels: tuple[str, ...], messages: int, seconds: float) -> None:
        with self._lock:
            count, total = self._totals.get(labels, (0, 0.0))
            self._totals[labels] = (count + messages, total + seconds)

    def collect(self) -> Iterator[Metric]:
        family = SummaryMetricFamily(self.name, self.doc, labels=LABELS)
        with self._lock:
            for labels, (count, total) in sorted(self._totals.items()):
                family.add_metric(list(labels), count, total)
        yield family


class Metrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        def counter(name: str, doc: str) -> Counter:
            return Counter(f"{_NS}_{name}", doc, LABELS, registry=registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"{_NS}_{name}", doc, LABELS, registry=registry)

        self.received_msgs = counter(
            "total_messages", "Messages read from the source, including skipped ones"
        )
        self.received_bytes = counter("total_bytes", "Payload bytes read from the source")
        self.copied_msgs = counter("copied_messages", "Messages copied to the target")
        self.copied_bytes = counter("copied_bytes", "Payload bytes copied to the target")
        self.skipped_msgs = counter("skipped_messages", "Messages not copied (sampling, or already copied)")
        self.skipped_bytes = counter("skipped_bytes", "Payload bytes not copied")
        self.too_old = counter("too_old_messages", "Messages skipped for being older than max_age")
        self.duplicates = counter("duplicate_messages", "Copies the target dropped as duplicates (replays)")
        self.driver_read_batches = counter(
            "driver_read_batches",
            "Batches small enough that the driver read them itself rather than Spark's tasks",
        )
        self.errors = counter("handler_error_count", "Batches that failed and were retried")
        self.processing_time = PerMessageTime(
            f"{_NS}_processing_time_seconds",
            "Time spent handling messages (a batch's seconds over its messages)",
            registry,
        )
        # Go counts events of its durable source consumer here; ours reads with a fresh
        # consumer or direct gets per range and retries a broken read with its batch (counted in
        # handler_error_count), so these stay 0: exported so Choria's panels show 0, not "no data".
        self.meta_parse_failed = counter(
            "meta_parse_failed_count", "Messages skipped because their JetStream metadata could not be "
            "parsed (always 0 here: such a read fails and its batch is retried)",
        )  # fmt: skip
        self.ack_failed = counter(
            "ack_failed_count", "Source acknowledgements that failed (always 0 here: the source is read "
            "without acknowledgements)",
        )  # fmt: skip
        self.consumer_recreated = counter(
            "consumer_recreated", "Source consumers recreated (always 0 here: every read makes its own)"
        )
        self.tracked = Gauge(
            "choria_stream_replicator_tracker_total_items", "Senders a sampled stream tracks", LABELS,
            registry=registry,
        )  # fmt: skip
        # The fleet at a glance (ours): tracked senders by state, and those that expired.
        self.senders = Gauge(
            "choria_stream_replicator_tracker_senders", "Tracked senders by state: healthy (seen within "
            "warn_duration), warning (advised timed out, not yet expired)", (*LABELS, "state"), registry=registry,
        )  # fmt: skip
        self.expired = Counter(
            "choria_stream_replicator_tracker_expired", "Senders expired (unseen for inspect_duration) and forgotten",
            LABELS, registry=registry,
        )  # fmt: skip
        self.lag = gauge(
            "stream_lag_messages",
            "Source messages past the last handled sequence, not counting those the source no longer holds",
        )
        self.sequence = gauge("stream_sequence", "Last source sequence processed")
        a = "choria_stream_replicator_advisor"
        self.advisories = Counter(
            f"{a}_total_messages", "Advisories published about senders, by event (label advisory: new, "
            "timeout, recover, expire)", ("advisory", "stream", "replicator"), registry=registry,
        )  # fmt: skip
        self.advisory_errors = Counter(
            f"{a}_publish_errors", "Advisories of batches whose advisories failed to publish (the batch "
            "is then retried, all of them again)",
            ("advisory", "stream", "replicator"), registry=registry,
        )  # fmt: skip
        lim = "choria_stream_replicator_limiter"
        self.unkeyed = Counter(
            f"{lim}_messages_without_limit_field_count", "Messages of a sampled stream without its "
            "sender field, header or token (always copied)", ("limiter", "stream", "replicator"),
            registry=registry,
        )  # fmt: skip
        self.forced = Counter(
            f"{lim}_messages_copy_forced_count", "Messages copied because their force field was true",
            ("limiter", "stream", "replicator"), registry=registry,
        )  # fmt: skip
        self.batch_seconds = Histogram(
            f"{_NS}_batch_duration_seconds",
            "Time to process one micro-batch (read, decide, publish, acknowledged)",
            LABELS,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.batch_steps = Histogram(
            f"{_NS}_batch_step_seconds",
            "Time spent in each step of a micro-batch, as Spark reports it (latestOffset, "
            "walCommit, queryPlanning, addBatch: reading and handing to the sink, commitOffsets; "
            "triggerExecution: the whole batch)",
            (*LABELS, "step"),
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )

        # Leader election and heartbeats, as the Go original names them.
        e = "choria_stream_replicator_election"
        self.election_campaigns = Counter(
            f"{e}_campaigns", "Campaigns a candidate took part in, by its state then",
            ("election", "identity", "state", "replicator"), registry=registry,
        )  # fmt: skip
        self.election_leader = Gauge(
            f"{e}_leader", "1 while this instance leads the election", ("election", "identity", "replicator"),
            registry=registry,
        )  # fmt: skip
        self.election_interval = Gauge(
            f"{e}_interval_seconds", "Seconds between campaigns", ("election", "identity", "replicator"),
            registry=registry,
        )  # fmt: skip
        h = "choria_stream_replicator_heartbeat"
        self.heartbeat_subjects = Gauge(
            f"{h}_subjects_count", "Subjects heartbeats are published to", ("replicator",), registry=registry
        )
        self.heartbeat_published = Counter(
            f"{h}_published_count", "Heartbeats published", ("replicator", "subject"), registry=registry
        )
        self.heartbeat_errors = Counter(
            f"{h}_published_error_count", "Heartbeats that failed to publish", ("replicator", "subject"),
            registry=registry,
        )  # fmt: skip
        self.heartbeat_time = Summary(
            f"{h}_publish_time", "Seconds to publish a heartbeat, JetStream acknowledgement included",
            ("replicator", "subject"), registry=registry,
        )  # fmt: skip
        self.heartbeat_paused = Gauge(
            f"{h}_paused", "1 while heartbeats wait for this instance to lead", ("replicator", "hostname"),
            registry=registry,
        )  # fmt: skip

    def start_series(self, labels: MetricLabels, sampled: bool = False, events: tuple[str, ...] = ()) -> None:
        """Create a stream's series at zero, so that every one is on /metrics from the start
        (an absent series reads as "no data", not 0, on a dashboard): a sampled stream's sender
        counts too, and its advisories per event (`events`: those it may publish)."""
        for m in (
            self.received_msgs, self.received_bytes, self.copied_msgs, self.copied_bytes,
            self.skipped_msgs, self.skipped_bytes, self.too_old, self.duplicates, self.driver_read_batches, self.errors,
            self.meta_parse_failed, self.ack_failed, self.consumer_recreated,
            self.lag, self.sequence, self.batch_seconds,
        ):  # fmt: skip
            m.labels(*labels.values())
        self.processing_time.observe(labels.values(), 0, 0.0)
        for step in BATCH_STEPS:
            self.batch_steps.labels(*labels.values(), step)
        if sampled:
            labels.of(self.tracked)
            labels.of(self.expired)
            for state in ("healthy", "warning"):
                self.senders.labels(*labels.values(), state)
            self.unkeyed.labels(LIMITER, labels.stream, labels.replicator)
            self.forced.labels(LIMITER, labels.stream, labels.replicator)
        for event in events:
            self.advisories.labels(event, labels.stream, labels.replicator)
            self.advisory_errors.labels(event, labels.stream, labels.replicator)


# Counters the Go original exports without a `_total` suffix: exported under exactly that name.
GO_COUNTERS = frozenset(
    [f"{_NS}_{n}" for n in ("total_messages", "total_bytes", "handler_error_count", "too_old_messages",
                            "copied_messages", "copied_bytes", "skipped_messages", "skipped_bytes",
                            "meta_parse_failed_count", "ack_failed_count", "consumer_recreated")]
    + ["choria_stream_replicator_advisor_total_messages", "choria_stream_replicator_advisor_publish_errors",
       "choria_stream_replicator_limiter_messages_without_limit_field_count",
       "choria_stream_replicator_limiter_messages_copy_forced_count",
       "choria_stream_replicator_election_campaigns", "choria_stream_replicator_heartbeat_published_count",
       "choria_stream_replicator_heartbeat_published_error_count"]
)  # fmt: skip


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """The Prometheus text format (0.0.4) of `registry`, with the Go original's counters under
    their Go names: the Python client writes a counter `x` as `x_total`, Go as `x`."""
    lines = generate_latest(registry).decode().split("\n")
    for i, line in enumerate(lines):
        if line.startswith("# "):
            name = line.split(" ", 3)[2] if line.count(" ") >= 2 else ""
        else:
            name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith("_total") and name[: -len("_total")] in GO_COUNTERS:
            lines[i] = line.replace(name, name[: -len("_total")], 1)
    return "\n".join(lines).encode()


_METRICS: Metrics | None = None


def metrics() -> Metrics:
    """The process-wide metrics (created once: prometheus names are global)."""
    global _METRICS
    if _METRICS is None:
        _METRICS = Metrics()
    return _METRICS


@dataclass(frozen=True)
class MetricLabels:
    stream: str
    replicator: str
    worker: str

    def of(self, metric: M) -> M:
        return metric.labels(self.stream, self.replicator, self.worker)

    def values(self) -> tuple[str, str, str]:
        return self.stream, self.replicator, self.worker
