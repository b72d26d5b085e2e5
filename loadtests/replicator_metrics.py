"""The replicator's Prometheus figures the load test reports (no gevent here: the orchestrator
imports it too)."""

from __future__ import annotations

import urllib.request


def scrape(url: str) -> dict[str, float]:
    """Sum the replicator's copied/received counters and lag over its streams."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=2) as r:
        text = r.read().decode()
    out = {"copied": 0.0, "received": 0.0, "lag": 0.0}
    names = {
        "choria_stream_replicator_replicator_copied_messages": "copied",
        "choria_stream_replicator_replicator_total_messages": "received",
        "choria_stream_replicator_replicator_stream_lag_messages": "lag",
    }
    for family in text_string_to_metric_families(text):
        key = names.get(family.name)
        if key:
            out[key] += sum(s.value for s in family.samples if not s.name.endswith("_created"))
    return out
