"""One stream entry, driven as the runner drives it, on real servers and a real Spark session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import SLOW_S, create_stream, publish, registration, run, wait_for
from nats_servers import NatsCluster

from harness.streams import copy_differences, count_messages
from replicator.aio import LoopThread
from replicator.config import parse_config
from replicator.replication import StreamReplication

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from replicator.spark.session import build_session

    s = build_session("local[1]", "entry")
    yield s
    s.stop()


def test_an_entry_started_again_while_its_query_runs_never_runs_two(
    spark: Any, source_server: NatsCluster, nats_server: NatsCluster, tmp_path: Path
) -> None:
    """An entry has one query. Started again while its query still runs (a hot standby whose
    take-over failed is retried after it lost the lead, its idle query still running: found by a
    cold review), the running query stops first. Before, the new start failed on Spark's "query
    with that name is already active" every time, and the running query went on unseen: once the
    instance led again it published beside each retry's catch-up."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "S", ["s.>"]))
    run(publish(src, [(f"s.{i % 5}", registration(i, 300), None) for i in range(200)]))
    cfg = parse_config({"name": "dc1", "state_store": str(tmp_path / "state"), "streams": [
        {"stream": "S", "source_url": src, "target_url": dst, "target_stream": "T"},
    ]})  # fmt: skip
    loop = LoopThread("test-entry")
    r = StreamReplication(cfg, cfg.streams[0], loop)
    try:
        assert r.prepare(lambda: False)
        first = r.start(spark)
        wait_for(lambda: run(count_messages(dst, "T")) == 200, SLOW_S, "the first copies")
        second = r.start(spark)
        assert r.query is second and second.isActive
        assert not first.isActive, "the first query still runs beside the second"
        assert [q.name for q in spark.streams.active] == [r.query_name]
        run(publish(src, [(f"s.{i % 5}", registration(i, 300), None) for i in range(200, 400)]))
        wait_for(lambda: run(count_messages(dst, "T")) == 400, SLOW_S, "the later copies")
        assert run(copy_differences(src, "S", dst, "T")) == []
    finally:
        r.stop()
        loop.stop()
