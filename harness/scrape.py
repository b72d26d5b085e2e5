"""A running replicator's progress, read from its /metrics endpoint."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

_NS = "choria_stream_replicator_replicator"
_SCRAPED = {
    f"{_NS}_total_messages": "received",
    f"{_NS}_copied_messages": "copied",
    f"{_NS}_stream_lag_messages": "lag",
    f"{_NS}_stream_sequence": "sequence",
}


def scrape(url: str, timeout: float = 2, worker: str | None = None) -> dict[str, float]:
    """received/copied counters, lag, sequence and completed batches: summed over the
    replicator's streams, or of the stream entry `worker`."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    out = dict.fromkeys([*_SCRAPED.values(), "batches"], 0.0)
    for family in text_string_to_metric_families(text):
        key = _SCRAPED.get(family.name)
        if family.name == f"{_NS}_batch_duration_seconds":
            out["batches"] += sum(
                s.value
                for s in family.samples
                if s.name.endswith("_count") and worker in (None, s.labels.get("worker"))
            )
        elif key:
            out[key] += sum(
                s.value
                for s in family.samples
                if not s.name.endswith("_created") and worker in (None, s.labels.get("worker"))
            )
    return out


def batch_steps(url: str, timeout: float = 5) -> dict[str, tuple[float, float]]:
    """{step: (seconds summed, batches)} of the replicator's batch_step_seconds histogram,
    summed over its streams (replicator.spark.listener feeds it)."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    out: dict[str, tuple[float, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != f"{_NS}_batch_step_seconds":
            continue
        for s in family.samples:
            seconds, batches = out.get(s.labels.get("step", ""), (0.0, 0.0))
            if s.name.endswith("_sum"):
                seconds += s.value
            elif s.name.endswith("_count"):
                batches += s.value
            out[s.labels.get("step", "")] = (seconds, batches)
    return out
