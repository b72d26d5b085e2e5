"""The Grafana dashboard shipped in packaging/grafana queries only metrics a running
replicator exports: scraped from a real one's /metrics, sampled stream and advisories included."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import create_stream, publish, run, start_replicator, wait_for, write_config
from prometheus_client.parser import text_string_to_metric_families

from harness.streams import count_messages as count

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).parents[2] / "packaging" / "grafana" / "stream-replicator.json"
METRIC_NAME = re.compile(r"\b(choria_stream_replicator_\w+)")


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs


def exported_samples(url: str) -> set[str]:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


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
        rep.wait_ready(120)
        run(publish(src, [(f"reg.{i}", b"x" * 200, {"X-Node": f"n{i}"}) for i in range(20)]))
        wait_for(lambda: run(count(src, "ADV")) >= 20, 60, "20 new advisories", rep)
        wait_for(lambda: run(count(dst, "REG")) >= 20, 60, "20 copies", rep)
        time.sleep(1)
        samples = exported_samples(rep.metrics_url)
    finally:
        assert rep.stop() == 0, rep.output()

    queried = {name for expr in dashboard_queries() for name in METRIC_NAME.findall(expr)}
    assert len(queried) >= 10, queried  # copy rate, lag, batch duration, bytes, advisories, errors...
    assert sorted(queried - samples) == [], f"queried but not exported; exported: {sorted(samples)}"
