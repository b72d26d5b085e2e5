"""`heartbeats:` as Choria users configure them: timestamps published into the source stream's
subjects reach the target through the copy, so latency can be watched on an idle stream."""

from __future__ import annotations

import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import nats
import pytest
from helpers import SLOW_S, run, start_replicator, wait_for, write_config

from harness.localnats import NatsCluster

from .test_faults import _create_source, source, target  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration


async def last_heartbeat(url: str, subject: str) -> tuple[dict[str, str], int, datetime] | None:
    nc = await nats.connect(url)
    try:
        try:
            m = await nc.jetstream().get_last_msg("REG", subject)
        except nats.js.errors.NotFoundError:
            return None
        return dict(m.headers or {}), int(m.data.decode()), m.time
    finally:
        await nc.close()


def test_heartbeats_reach_the_target_through_the_copy_with_chorias_headers(
    source: NatsCluster,  # noqa: F811
    target: NatsCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    src, dst = source.url, target.url
    run(_create_source(src))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [{"stream": "REG", "source_url": src, "target_url": dst}],
        heartbeats={
            "url": src,
            "interval": "1s",
            "headers": {"from": "dc1", "noop": "false"},
            "subjects": [
                {"subject": "reg._monitor"},
                {"subject": "reg._slow", "interval": "3s", "headers": {"noop": "true"}},
            ],
        },
    )
    rep = start_replicator(cfg)
    try:
        wait_for(
            lambda: run(last_heartbeat(dst, "reg._slow")) is not None,
            SLOW_S,
            "a heartbeat in the target",
            rep,
        )
        time.sleep(4)
        fast = run(last_heartbeat(dst, "reg._monitor"))
        slow = run(last_heartbeat(dst, "reg._slow"))
        assert fast is not None and slow is not None
        headers, sent, stored = fast
        assert headers["from"] == "dc1" and headers["noop"] == "false"
        assert headers["Choria-SR-Subject"] == "reg._monitor" and headers["Choria-SR-Originator"]
        assert slow[0]["noop"] == "true"  # the subject's own header wins
        # The body is the unix time it was sent; the copy landed in the target after it.
        assert abs(sent - time.time()) < 30
        assert stored.astimezone(UTC).timestamp() >= sent - 1
        assert "Choria-SR-Source" in headers  # it came through the replicator
        with urllib.request.urlopen(rep.metrics_url, timeout=5) as r:
            text = r.read().decode()
        assert 'choria_stream_replicator_heartbeat_subjects_count{replicator="dc1"} 2.0' in text
        assert (
            'choria_stream_replicator_heartbeat_published_count{replicator="dc1",subject="reg._monitor"}'
            in text
        )
        assert rep.stop() == 0, rep.output()
    finally:
        rep.kill9()


def test_a_file_with_only_heartbeats_runs_them_without_spark(
    source: NatsCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Choria's replicator runs a file with `heartbeats:` and no streams; so does ours."""
    src = source.url
    run(_create_source(src))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [],
        heartbeats={"url": src, "interval": "1s", "subjects": [{"subject": "reg._monitor"}]},
    )
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)  # ready without a stream to replicate
        wait_for(lambda: run(last_heartbeat(src, "reg._monitor")) is not None, SLOW_S, "a heartbeat", rep)
        assert "sending heartbeats only" in rep.output()
        assert "starting Spark" not in rep.output()
        assert rep.stop() == 0, rep.output()
    finally:
        rep.kill9()
