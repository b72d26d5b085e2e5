"""Prometheus metrics, named like the Choria Stream Replicator's where the meaning matches
(`choria_stream_replicator_replicator_*`, labels stream/replicator/worker)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

LABELS = ("stream", "replicator", "worker")
M = TypeVar("M", Counter, Gauge, Histogram)
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
        self.lag = gauge("stream_lag_messages", "Last source sequence minus last copied sequence")
        self.sequence = gauge("stream_sequence", "Last source sequence processed")
        self.advisories = Counter(
            f"{_NS}_advisories",
            "Advisories published about senders, by event (new, timeout, recover, expire)",
            (*LABELS, "event"),
            registry=registry,
        )
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
        self.heartbeat_time = Histogram(
            f"{h}_publish_time", "Seconds to publish a heartbeat, JetStream acknowledgement included",
            ("replicator", "subject"), registry=registry,
        )  # fmt: skip
        self.heartbeat_paused = Gauge(
            f"{h}_paused", "1 while heartbeats wait for this instance to lead", ("replicator", "hostname"),
            registry=registry,
        )  # fmt: skip

    def start_series(self, labels: MetricLabels, events: tuple[str, ...] = ()) -> None:
        """Create a stream's series at zero, so that every one is on /metrics from the start
        (an absent series reads as "no data", not 0, on a dashboard), advisories per event."""
        for m in (
            self.received_msgs, self.received_bytes, self.copied_msgs, self.copied_bytes,
            self.skipped_msgs, self.skipped_bytes, self.too_old, self.duplicates, self.driver_read_batches, self.errors,
            self.lag, self.sequence, self.batch_seconds,
        ):  # fmt: skip
            m.labels(*labels.values())
        for event in events:
            self.advisories.labels(*labels.values(), event)
        for step in BATCH_STEPS:
            self.batch_steps.labels(*labels.values(), step)


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
