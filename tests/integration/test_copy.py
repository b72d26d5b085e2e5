"""The core promise: every source message arrives in the target, in order, rewritten, headed."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import nats
import pytest
from helpers import (
    SLOW_S,
    create_stream,
    publish,
    registration,
    run,
    start_replicator,
    tree,
    tree_commands,
    wait_for,
    write_config,
)
from nats.js.api import StreamConfig, StreamSource

from harness.localnats import free_port
from harness.scrape import batch_steps, scrape
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.headers import MSG_ID_HEADER, SOURCE_HEADER, parse_source_header
from replicator.nats.wire import first_value
from replicator.spark.internals import NO_CODEGEN_CONF, NO_DATA_SOURCE_LOOKUP
from replicator.spark.session import NO_PYTHON_DAEMON_CONF

pytestmark = pytest.mark.integration


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


@pytest.mark.parametrize("driver_reads", ["small", "auto"])
def test_full_copy_with_subject_rewrite_and_headers(
    source_cluster, nats_server, tmp_path: Path, driver_reads: str
) -> None:
    src, dst = source_cluster.url, nats_server.url
    run(create_stream(src, "NODE_DATA", ["NODE_DATA.>"], num_replicas=3))
    items = [(f"NODE_DATA.host{i % 7}", registration(i), {"X-Origin": f"o{i}"}) for i in range(3000)]
    seqs = run(publish(src, items))
    port = free_port()
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        monitor_port=port,
        streams=[
            {
                "name": "nodes",
                "stream": "NODE_DATA",
                "source_url": src,
                "target_url": dst,
                "target_stream": "FLEET_NODES",
                "target_subject_prefix": "FLEET_NODES",
                "target_subject_remove": "NODE_DATA",
                "driver_reads": driver_reads,
                "copy_ahead": False,  # the query's batches copy the backlog: their steps are checked
            }
        ],
    )
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "FLEET_NODES")) >= len(items), SLOW_S, "all messages copied", rep)
        labels = 'replicator="dc1",stream="NODE_DATA",worker="nodes"'
        wait_for(
            lambda: f"stream_lag_messages{{{labels}}} 0.0" in _scrape(port), SLOW_S, "lag 0 in metrics", rep
        )
        metrics_url = f"http://127.0.0.1:{port}/metrics"

        def steps_now() -> dict[str, float]:
            return {step: batches for step, (_, batches) in batch_steps(metrics_url).items()}

        # A batch's steps come from Spark's progress event, after its commit and through the
        # listener bus: on a loaded machine later than its copies' acks (and the lag of 0).
        wait_for(lambda: steps_now().get("triggerExecution", 0) >= scrape(metrics_url)["batches"], SLOW_S,
                 "every handled batch's steps in the metrics", rep)  # fmt: skip
        text = _scrape(port)
        assert f"choria_stream_replicator_replicator_copied_messages{{{labels}}} 3000.0" in text
        assert f"choria_stream_replicator_replicator_total_messages{{{labels}}} 3000.0" in text
        assert f"choria_stream_replicator_replicator_stream_sequence{{{labels}}} 3000.0" in text
        # Where each batch's time went, step by step (Spark's own breakdown), for every batch.
        steps = steps_now()
        assert {"latestOffset", "addBatch", "triggerExecution"} <= set(steps), steps
        assert steps["triggerExecution"] >= 1 and steps["addBatch"] == steps["triggerExecution"], steps
        read_by_driver = f"choria_stream_replicator_replicator_driver_read_batches_total{{{labels}}} "
        driver_batches = float(text.split(read_by_driver, 1)[1].split()[0])
        if driver_reads == "small":
            # Batches start at 2,000 messages (read by Spark's tasks); the last 1,000 are few
            # enough for the driver to read itself (replicator.spark.small_batches).
            assert 1 <= driver_batches < steps["addBatch"], (driver_batches, steps)
        else:  # Spark runs embedded here: the driver reads every batch
            assert driver_batches == steps["addBatch"], (driver_batches, steps)
    finally:
        assert rep.stop() == 0, rep.output()
    got = run(read_all(dst, "FLEET_NODES"))
    assert len(got) == len(items)
    marks = [parse_source_header(first_value(m.headers, SOURCE_HEADER)) for m in got]
    # In source order, each exactly once.
    assert [mk.sequence for mk in marks if mk] == seqs
    for m, mk, (subject, data, hdr) in zip(got, marks, items, strict=True):
        assert (
            mk is not None
            and mk.stream == "NODE_DATA"
            and mk.replicator == "dc1"
            and mk.config_name == "nodes"
        )
        assert m.subject == subject.replace("NODE_DATA.", "FLEET_NODES.")
        assert m.data == data
        assert first_value(m.headers, "X-Origin") == hdr["X-Origin"]
        assert (first_value(m.headers, MSG_ID_HEADER) or "").endswith(f":{mk.sequence}")
        assert mk.timestamp_ms > 0


def test_a_source_stream_that_sources_others_is_copied_whole(
    source_server, nats_server, tmp_path: Path
) -> None:
    """The server marks each message a stream sourced (Nats-Stream-Source) and refuses a publish
    that carries that header: copied as it was, every copy was refused (found by the fault
    campaign, whose limited source stream sources the fleet's)."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "ORIG", ["orig.>"]))

    async def aggregate() -> None:
        nc = await nats.connect(src)
        try:
            await nc.jetstream().add_stream(
                StreamConfig(name="AGG", sources=[StreamSource(name="ORIG")], allow_direct=True)
            )
        finally:
            await nc.close()

    run(aggregate())
    run(create_stream(dst, "AGG", ["orig.>"]))  # a sourced stream has no subjects to copy
    items = [(f"orig.host{i % 5}", registration(i), None) for i in range(300)]
    run(publish(src, items, stream="ORIG"))
    wait_for(lambda: run(count(src, "AGG")) == len(items), SLOW_S, "AGG sourced every message")
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        streams=[{"name": "agg", "stream": "AGG", "source_url": src, "target_url": dst}],
    )
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "AGG")) >= len(items), SLOW_S, "every sourced message copied", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    got = run(read_all(dst, "AGG"))
    assert [m.data for m in got] == [data for _, data, _ in items]
    assert all(first_value(m.headers, "Nats-Stream-Source") is None for m in got)


def _environ(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/environ").read_text()
    return dict(kv.split("=", 1) for kv in text.split("\0") if "=" in kv)


def _assert_a_light_copy_process(root: int) -> None:
    """What keeps an embedded copy-only process light (docs/performance.md)."""
    # No task workers were started: embedded, the driver reads every copy batch itself.
    assert not any(" pyspark.worker" in c for c in tree_commands(root))
    processes = tree(root)
    assert any("java" in c and " -Xms32m -Xmn16m " in f" {c} " for c in processes.values()), processes
    # Nor does Spark generate code for the batches' plans, which run only for a batch the
    # driver could not read (NO_CODEGEN_CONF), or keep pyspark's daemon for its Python
    # processes (NO_PYTHON_DAEMON_CONF): the planner steps' processes end with them.
    for key, value in {**NO_CODEGEN_CONF, **NO_PYTHON_DAEMON_CONF}.items():
        assert any("java" in c and f"{key}={value}" in c for c in processes.values()), processes
    # The JVM finds no command in PYSPARK_DRIVER_PYTHON, so it looks up no third-party data
    # sources; it starts the stream's runner with the data source's interpreter, through the
    # script that drops pyspark's zip.
    jvm = next(pid for pid, c in processes.items() if "java" in c.split(" ", 1)[0])
    assert _environ(jvm)["PYSPARK_DRIVER_PYTHON"] == NO_DATA_SOURCE_LOOKUP, _environ(jvm)
    runners = [pid for pid, c in processes.items() if "python_streaming_source_runner" in c]
    assert runners, processes
    for pid in runners:
        assert "pyspark.zip" not in _environ(pid).get("PYTHONPATH", ""), _environ(pid)
        # Nor does the runner, which lives as long as the query, load pyarrow (~40 MB) for
        # rows it never sends (replicator.spark.source_runner).
        assert "replicator.spark.source_runner" in processes[pid], processes[pid]
        assert "/pyarrow/" not in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("driver_reads", ["auto", "small"])
def test_spark_planner_processes_are_released_and_the_copy_goes_on(
    source_server, nats_server, tmp_path: Path, driver_reads: str
) -> None:
    """Spark keeps the Python processes that planned the query (~420 MB) for the session's life;
    the replicator stops them once the query runs (replicator.spark.planners), and a later query
    start (after a failed batch, say) gets new ones. With `driver_reads: small`, Spark's tasks
    read the larger batches and its Python processes run under pyspark's daemon, which keeps
    them until they are stopped. A copy-only process whose driver reads every batch is kept
    light meanwhile (_assert_a_light_copy_process)."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "EVENTS", ["events.>"]))
    run(publish(src, [(f"events.{i % 5}", registration(i), None) for i in range(2000)]))
    # The query's batches copy the backlog (not the driver ahead of it): their planners are checked.
    stream = {"stream": "EVENTS", "source_url": src, "target_url": dst, "driver_reads": driver_reads,
              "copy_ahead": False}  # fmt: skip
    rep = start_replicator(write_config(tmp_path / "sr.yaml", "dc1", [stream]))

    def planners() -> list[str]:
        return [c for c in tree_commands(rep.proc.pid) if "pyspark.sql.worker." in c]

    try:
        wait_for(lambda: run(count(dst, "EVENTS")) >= 2000, SLOW_S, "the backlog copied", rep)
        wait_for(lambda: not planners(), SLOW_S, "planner processes gone", rep)
        if driver_reads == "auto":
            _assert_a_light_copy_process(rep.proc.pid)
        run(publish(src, [(f"events.{i % 5}", registration(i), None) for i in range(2000, 2500)]))
        wait_for(lambda: run(count(dst, "EVENTS")) >= 2500, SLOW_S, "new messages copied", rep)
        assert not planners()
    finally:
        assert rep.stop() == 0, rep.output()
    assert run(count(dst, "EVENTS")) == 2500
