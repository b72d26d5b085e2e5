"""The tests' and harness's reading of /metrics: the replicator's own exposition (Go counter
names, Python counters, gauges, histograms), served over HTTP as the monitor serves it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry

from harness.scrape import batch_steps, metric_sum, scrape
from replicator.metrics import MetricLabels, Metrics, exposition

NS = "choria_stream_replicator"


@pytest.fixture
def served() -> Iterator[tuple[Metrics, str]]:
    registry = CollectorRegistry()
    m = Metrics(registry)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exposition(registry)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield m, f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_progress_is_summed_over_entries_or_read_for_one(served: tuple[Metrics, str]) -> None:
    m, url = served
    reg, adv = MetricLabels("REG", "dc1", "reg"), MetricLabels("ADV", "dc1", "adv")
    for labels, received, copied, seq in ((reg, 10, 4, 10), (adv, 5, 5, 7)):
        m.start_series(labels)
        labels.of(m.received_msgs).inc(received)
        labels.of(m.copied_msgs).inc(copied)
        labels.of(m.sequence).set(seq)
        labels.of(m.lag).set(1)
        labels.of(m.batch_seconds).observe(0.1)
    labels.of(m.batch_seconds).observe(0.2)
    assert scrape(url) == {"received": 15, "copied": 9, "lag": 2, "sequence": 17, "batches": 3}
    assert scrape(url, worker="reg") == {"received": 10, "copied": 4, "lag": 1, "sequence": 10, "batches": 1}


def test_a_family_is_summed_over_the_series_with_the_labels_asked(served: tuple[Metrics, str]) -> None:
    m, url = served
    labels = MetricLabels("REG", "dc1", "reg")
    m.start_series(labels, sampled=True, events=("new", "expire"))
    m.advisories.labels("new", "REG", "dc1").inc(3)
    m.advisories.labels("expire", "REG", "dc1").inc(2)
    m.election_campaigns.labels("SR_dc1_REG", "a", "candidate", "dc1").inc(4)
    m.election_campaigns.labels("SR_dc1_REG", "a", "leader", "dc1").inc(9)
    m.batch_steps.labels("REG", "dc1", "reg", "addBatch").observe(0.5)

    assert metric_sum(url, f"{NS}_advisor_total_messages") == 5  # a Go counter, under its Go name
    assert metric_sum(url, f"{NS}_advisor_total_messages", advisory="new") == 3
    assert metric_sum(url, f"{NS}_election_campaigns", state="candidate") == 4  # a Python counter
    assert metric_sum(url, f"{NS}_election_campaigns", state="none") == 0
    assert metric_sum(url, f"{NS}_replicator_batch_step_seconds", "_count", step="addBatch") == 1
    assert batch_steps(url)["addBatch"] == (0.5, 1)
