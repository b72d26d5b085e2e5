"""A running replicator's progress, read from its /metrics endpoint."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# Every metric name's prefix.
NS = "choria_stream_replicator_replicator"
_SCRAPED = {
    f"{NS}_total_messages": "received",
    f"{NS}_copied_messages": "copied",
    f"{NS}_stream_lag_messages": "lag",
    f"{NS}_stream_sequence": "sequence",
}


def read_samples(url: str, timeout: float = 5) -> dict[str, list[Sample]]:
    """The replicator's /metrics: each family's samples, by family name."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def samples_of(
    families: dict[str, list[Sample]], family: str, suffix: str = "", **labels: str
) -> list[Sample]:
    """`family`'s samples whose labels include `labels`: its value series (a gauge's, a
    counter's `_total`), or the series `family + suffix` (a histogram's `_count`, `_sum`)."""
    names = {family + suffix} if suffix else {family, f"{family}_total"}
    return [
        s
        for s in families.get(family, [])
        if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def metric_sum(url: str, family: str, suffix: str = "", timeout: float = 5, **labels: str) -> float:
    """`family`'s series whose labels include `labels`, summed (see samples_of)."""
    return sum(s.value for s in samples_of(read_samples(url, timeout), family, suffix, **labels))


def scrape(url: str, timeout: float = 2, worker: str | None = None) -> dict[str, float]:
    """received/copied counters, lag, sequence and completed batches: summed over the
    replicator's streams, or of the stream entry `worker`."""
    families = read_samples(url, timeout)
    which = {} if worker is None else {"worker": worker}
    out = {key: sum(s.value for s in samples_of(families, name, **which)) for name, key in _SCRAPED.items()}
    out["batches"] = sum(
        s.value for s in samples_of(families, f"{NS}_batch_duration_seconds", "_count", **which)
    )
    return out


def batch_steps(url: str, timeout: float = 5) -> dict[str, tuple[float, float]]:
    """{step: (seconds summed, batches)} of the replicator's batch_step_seconds histogram,
    summed over its streams (replicator.spark.listener feeds it)."""
    out: dict[str, tuple[float, float]] = {}
    for s in read_samples(url, timeout).get(f"{NS}_batch_step_seconds", []):
        seconds, batches = out.get(s.labels.get("step", ""), (0.0, 0.0))
        if s.name.endswith("_sum"):
            seconds += s.value
        elif s.name.endswith("_count"):
            batches += s.value
        out[s.labels.get("step", "")] = (seconds, batches)
    return out
