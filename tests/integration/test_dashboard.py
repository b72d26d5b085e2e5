"""The Grafana dashboard shipped in packaging/grafana, and Choria's own (a switched user's),
query only metrics a running replicator exports: scraped from a real one's /metrics, sampled
stream and advisories included, as Prometheus reads the names."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from helpers import (
    SLOW_S,
    create_stream,
    publish,
    run,
    start_replicator,
    wait_for,
    wait_handled,
    write_config,
)
from prometheus_client.parser import text_string_to_metric_families

from harness.streams import count_messages as count

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
DASHBOARD = ROOT / "packaging" / "grafana" / "stream-replicator.json"
CHORIA_METRICS = ROOT / "tests" / "data" / "choria-dashboard-metrics.txt"
# The Go original's dashboard, where this checkout sits beside the peers' folder.
CHORIA_DASHBOARD = (
    ROOT.parent / "shared" / "peers" / "choria-stream-replicator" / "reference" / "grafana-dashboard.json"
)
METRIC_NAME = re.compile(r"\b(choria_stream_replicator_\w+)")


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs


def choria_dashboard_metrics() -> set[str]:
    names = {line for line in CHORIA_METRICS.read_text().splitlines() if line and not line.startswith("#")}
    if CHORIA_DASHBOARD.exists():  # the list is what that dashboard queries, no more, no less
        queried = set(METRIC_NAME.findall(json.dumps(json.loads(CHORIA_DASHBOARD.read_text()))))
        assert names == queried, f"{CHORIA_METRICS.name} differs from {CHORIA_DASHBOARD}"
    return names


def exported_samples(url: str) -> set[str]:
    """Sample names as Prometheus reads them (the Python parser would add `_total` to a
    counter's), checked to parse."""
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    assert list(text_string_to_metric_families(text))
    return {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }


def test_every_metric_the_dashboard_queries_is_exported(source_server, nats_server, tmp_path: Path) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"]))
    run(create_stream(src, "ADV", ["adv.>"]))
    stream = {
        "stream": "REG",
        "source_url": src,
        "target_url": dst,
        "inspect_header": "X-Node",
        "inspect_duration": "1h",
        "advisory": {"subject": "adv.%s.%v"},
    }
    rep = start_replicator(write_config(tmp_path / "sr.yaml", "dc1", [stream]))
    try:
        rep.wait_ready(SLOW_S)
        run(publish(src, [(f"reg.{i}", b"x" * 200, {"X-Node": f"n{i}"}) for i in range(20)]))
        wait_for(lambda: run(count(src, "ADV")) >= 20, SLOW_S, "20 new advisories", rep)
        wait_for(lambda: run(count(dst, "REG")) >= 20, SLOW_S, "20 copies", rep)
        wait_handled(rep, src, "REG")
        samples = exported_samples(rep.metrics_url)
    finally:
        assert rep.stop() == 0, rep.output()

    queried = {name for expr in dashboard_queries() for name in METRIC_NAME.findall(expr)}
    assert len(queried) >= 10, queried  # copy rate, lag, batch duration, bytes, advisories, errors...
    assert sorted(queried - samples) == [], f"queried but not exported; exported: {sorted(samples)}"
    choria = choria_dashboard_metrics()
    assert sorted(choria - samples) == [], f"Choria's dashboard queries these; exported: {sorted(samples)}"
