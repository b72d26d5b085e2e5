"""Copies made ahead of the query while Spark starts (replicator.head_start): the first copies do
not wait for the JVM, and neither a kill -9 nor a stop among them loses, doubles or reorders
one, on single servers and on 3-server clusters with R3 streams."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import yaml
from helpers import (
    SLOW_S,
    bury_our_last_copy,
    copied_source_sequences,
    create_stream,
    our_copies,
    publish,
    registration,
    restart_until_handled,
    run,
    run_until_handled,
    start_replicator,
    wait_for,
    wait_handled,
    write_config,
)
from nats_servers import NatsCluster

from harness.streams import count_messages as count
from replicator.config import load_config
from replicator.entry_files import live_mark_path
from replicator.live_mark import read_live_mark

pytestmark = pytest.mark.integration


def _backlog(src: str, dst: str, tmp_path: Path, n: int, replicas: int = 1) -> Path:
    run(create_stream(src, "ORDERS", ["orders.>"], num_replicas=replicas))
    run(publish(src, [(f"orders.{i % 13}", registration(i, 500), None) for i in range(n)]))
    entry = {"stream": "ORDERS", "source_url": src, "target_url": dst, "batch_max_messages": 2_000,
             "copy_ahead": True}  # fmt: skip
    return write_config(tmp_path / "sr.yaml", "dc1", [entry])


def _ahead(log: str, entry: str = "ORDERS/dc1") -> list[tuple[int, int]]:
    """The ranges the entry's log says it copied ahead of its query."""
    found = re.findall(rf"{entry}: copying source sequences (\d+)-(\d+) ahead of the query", log)
    return [(int(a), int(b)) for a, b in found]


def _one(last: int) -> list[int]:
    """The source sequences the filtered entry copies (orders.1, from 5,000 on) up to `last`."""
    return [q for q in range(5_000, last + 1) if (q - 1) % 13 == 1]


def test_a_backlog_is_copied_ahead_of_spark_and_the_query_goes_on_after_it(
    source_server: NatsCluster, nats_server: NatsCluster, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    cfg = _backlog(src, dst, tmp_path, 20_000)
    # A second entry reads one subject from sequence 5,000 on: ahead of its query, the same.
    data = yaml.safe_load(cfg.read_text())
    data["streams"].append(
        {**data["streams"][0], "name": "one", "filter_subject": "orders.1", "start_sequence": 5_000,
         "target_stream": "ONE", "target_subject_prefix": "one"}
    )  # fmt: skip
    cfg.write_text(yaml.safe_dump(data))
    rep = start_replicator(cfg)
    try:
        # Copies arrive before Spark's session is up: the driver made them.
        wait_for(lambda: run(count(dst, "ORDERS")) > 0, SLOW_S, "a first copy", rep)
        assert "Spark started" not in rep.output(), rep.output()
        rep.wait_ready(SLOW_S)
        run(publish(src, [(f"orders.{i % 13}", registration(i, 500), None) for i in range(20_000, 21_000)]))
        wait_handled(rep, src, "ORDERS")
        wait_for(
            lambda: run(count(dst, "ONE")) == len(_one(21_000)), SLOW_S, "the filtered entry's copies", rep
        )
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "ORDERS") == list(range(1, 21_001)), "each once, in order"
    assert copied_source_sequences(dst, "ONE") == _one(21_000)
    assert _ahead(rep.output(10**9)) == [(1, 20_000)]
    assert _ahead(rep.output(10**9), "ORDERS/one") == [(5_000, 20_000)]

    # Started again with more in the source: ahead of the query from the target's last copy.
    run(publish(src, [(f"orders.{i % 13}", registration(i, 500), None) for i in range(21_000, 24_000)]))
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        wait_handled(rep, src, "ORDERS")
        wait_for(
            lambda: run(count(dst, "ONE")) == len(_one(24_000)), SLOW_S, "the filtered entry's copies", rep
        )
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "ORDERS") == list(range(1, 24_001)), "each once, in order"
    assert copied_source_sequences(dst, "ONE") == _one(24_000)
    assert _ahead(rep.output(10**9)) == [(21_001, 24_000)]  # after the target's last copy
    [(first, end)] = _ahead(rep.output(10**9), "ORDERS/one")  # after its own last copy
    assert first > _one(21_000)[-1] and end == 24_000


@pytest.mark.parametrize("servers", [1, 3], ids=["single", "r3"])
def test_a_kill_9_while_copying_ahead_then_a_restart_gives_an_exact_copy(
    tmp_path: Path, servers: int
) -> None:
    from nats_servers import nats_cluster

    with nats_cluster(servers, "source") as source, nats_cluster(servers, "target") as target:
        src, dst = source.url, target.url
        if servers > 1:
            run(create_stream(dst, "ORDERS", ["orders.>"], num_replicas=3))
        cfg = _backlog(src, dst, tmp_path, 60_000, replicas=servers)
        rep = start_replicator(cfg)
        # Killed among the copies ahead, with some acknowledged and others in flight.
        wait_for(lambda: run(count(dst, "ORDERS")) >= 1_000, SLOW_S, "copies ahead under way", rep)
        rep.kill9()
        partial = run(count(dst, "ORDERS"))
        out = rep.output(10**9)
        assert "ahead of the query" in out and "Spark started" not in out, out
        assert partial < 60_000
        rep = start_replicator(cfg)
        try:
            wait_for(lambda: run(count(dst, "ORDERS")) >= 60_000, SLOW_S, "the rest after the restart", rep)
            rep.wait_ready(SLOW_S)
            wait_handled(rep, src, "ORDERS")
        finally:
            assert rep.stop() == 0, rep.output()
        assert copied_source_sequences(dst, "ORDERS") == list(range(1, 60_001)), "each once, in order"


def test_a_stop_while_copying_ahead_is_clean_and_the_next_start_goes_on(
    source_server: NatsCluster, nats_server: NatsCluster, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    cfg = _backlog(src, dst, tmp_path, 60_000)
    rep = start_replicator(cfg)
    wait_for(lambda: run(count(dst, "ORDERS")) >= 1_000, SLOW_S, "copies ahead under way", rep)
    assert rep.proc is not None
    os.killpg(rep.proc.pid, signal.SIGTERM)  # the whole group, as systemd does: the JVM too
    assert rep.proc.wait(60) == 0, rep.output()
    out = rep.output(10**9)
    assert "Traceback" not in out and " ERROR " not in out, out
    run_until_handled(cfg, src, "ORDERS")
    assert copied_source_sequences(dst, "ORDERS") == list(range(1, 60_001)), "each once, in order"


@pytest.mark.parametrize("servers", [1, 3], ids=["single", "r3"])
def test_a_stop_while_copying_ahead_leaves_a_mark_the_next_start_keeps_to_past_the_duplicate_window(
    tmp_path: Path, servers: int
) -> None:
    """An entry stopped among its copies ahead, before its query started, leaves its checkpoint
    where the last run ended. A start finds its last copy in the target's tail, but not once
    another writer has stored 10,000 messages after it: past the target's duplicate window, it
    would store the copies ahead again. The stop writes how far the target acknowledged them."""
    from nats_servers import nats_cluster

    with nats_cluster(servers, "source") as source, nats_cluster(servers, "target") as target:
        src, dst = source.url, target.url
        run(create_stream(dst, "ORDERS", ["orders.>", "other.>"], duplicate_window=1.0, num_replicas=servers))
        cfg = _backlog(src, dst, tmp_path, 20_000, replicas=servers)
        run_until_handled(cfg, src, "ORDERS")  # a checkpoint with batches committed
        run(publish(src, [(f"orders.{i % 13}", registration(i, 500), None) for i in range(20_000, 80_000)]))
        rep = start_replicator(cfg)
        wait_for(lambda: run(count(dst, "ORDERS")) >= 21_000, SLOW_S, "copies ahead under way", rep)
        assert rep.proc is not None
        os.killpg(rep.proc.pid, signal.SIGTERM)
        assert rep.proc.wait(60) == 0, rep.output()
        out = rep.output(10**9)
        assert "ahead of the query" in out and "replicating to" not in out, (
            "the query started: nothing here was tested"
        )
        stored = run(count(dst, "ORDERS"))
        assert stored < 80_000
        loaded = load_config(cfg)
        mark = read_live_mark(live_mark_path(loaded, loaded.streams[0]))
        assert mark is not None and mark.seq == stored and mark.target_seq == stored, (mark, stored)
        # Another writer buries our last copy; the duplicate window passes (the server drops
        # the ids it keeps a moment after the window: twice as long).
        bury_our_last_copy(dst)
        rep = restart_until_handled(cfg, src)
        ours = our_copies(dst)
        assert ours == list(range(1, 80_001)), f"{len(ours) - 80_000} copies stored again"
        # Kept to the mark, not saved by the server's duplicate ids (their purge has no deadline).
        assert f"the last run's live copies reached source sequence {stored}" in rep.output(10**9)
