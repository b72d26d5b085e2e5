"""What an operator's log shipper receives from a real run with `log_format: json`: one JSON
object a line, Spark's and the JVM's lines included, the stream named on each line about it,
and none of the JVM's start-up chatter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import SLOW_S, orders_backlog, run, start_replicator, wait_for

from harness.streams import count_messages as count

pytestmark = pytest.mark.integration


def test_a_json_log_is_one_object_a_line_naming_the_stream(
    source_server, nats_server, tmp_path: Path
) -> None:
    cfg, n = orders_backlog(source_server.url, nats_server.url, tmp_path, 500, batch_max_messages=100)
    data = yaml.safe_load(cfg.read_text())
    logfile = tmp_path / "replicator.json.log"
    data.update(log_format="json", logfile=str(logfile))
    cfg.write_text(yaml.safe_dump(data))

    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(nats_server.url, "ORDERS")) >= n, SLOW_S, "the copy", rep)
    finally:
        assert rep.stop() == 0, rep.output()

    lines = logfile.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is a JSON object
    assert all(set(r) == {"time", "level", "logger", "stream", "message"} for r in records), records
    about_orders = [r for r in records if r["stream"] == "ORDERS/dc1"]
    assert any(r["message"].startswith("replicating to ORDERS") for r in about_orders), records
    assert any(r["message"] == "stopped" and r["stream"] is None for r in records), records
    text = logfile.read_text() + rep.output()
    for chatter in ("Using incubator modules", "Setting default log level", "sc.setLogLevel"):
        assert chatter not in text
