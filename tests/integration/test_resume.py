"""Killing the replicator at any moment and starting it again loses and duplicates nothing."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from helpers import (
    SLOW_S,
    checkpoint_places,
    checkpoints_in,
    copied_source_sequences,
    create_stream,
    orders_backlog,
    publish,
    registration,
    run,
    run_until_handled,
    start_replicator,
    update_stream,
    wait_for,
    write_config,
)
from nats_servers import NatsCluster, nats_cluster

from harness.faultproxy import FaultProxy
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.jetstream import created_us
from replicator.nats.wire import first_value

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("place", ["state_store", "checkpoint_store"])
def test_kill9_mid_copy_then_restart_gives_exact_copy(
    source_server, nats_server, tmp_path: Path, place: str
) -> None:
    src, dst = source_server.url, nats_server.url
    top = checkpoint_places(tmp_path)[place]
    # The replicator reaches the target through a proxy: stalled before the kill, it holds the
    # copies sent and not yet stored, so the kill falls inside the backlog however fast the
    # copy runs (at ~30,000 copies a second a poll can miss the whole rest of it).
    with FaultProxy(int(dst.rsplit(":", 1)[1])) as link:
        cfg, n_first = orders_backlog(src, link.url, tmp_path, 30_000, batch_max_messages=2000, **top)
        rep = start_replicator(cfg)
        # Kill -9 while copies are in flight (somewhere inside the backlog), not at a batch boundary.
        wait_for(lambda: run(count(dst, "ORDERS")) >= 7_000, SLOW_S, "copying under way", rep)
        link.stall()
        rep.kill9()
        link.cut()  # what the dead process sent and the proxy held is lost with its connection
        partial = run(count(dst, "ORDERS"))
        assert 0 < partial < n_first
        link.restore()

        # More data arrives while the replicator is down; then it starts again and catches up.
        more = [(f"orders.{i % 13}", registration(i), None) for i in range(30_000, 35_000)]
        run(publish(src, more))
        rep2 = start_replicator(cfg)
        try:
            total = n_first + len(more)
            wait_for(lambda: run(count(dst, "ORDERS")) >= total, SLOW_S, "catch-up after restart", rep2)
        finally:
            assert rep2.stop() == 0, rep2.output()
    got = run(read_all(dst, "ORDERS"))
    want = run(read_all(src, "ORDERS"))
    assert copied_source_sequences(dst, "ORDERS") == [m.seq for m in want], (
        "target must equal source sequence by sequence, no duplicates"
    )
    assert [m.data for m in got] == [m.data for m in want]
    assert "resuming after it" in rep2.output()
    # The checkpoint is where the config puts it, and only there.
    shared = checkpoints_in(tmp_path / "shared")
    assert (len(shared), len(checkpoints_in(tmp_path / "state"))) == ((1, 0) if top else (0, 1))
    if top:
        assert (shared[0] / "sr-initial-offset.json").is_file()
    # A copy-only process writes its logs without Hadoop's .crc files (docs/design.md, Spark
    # settings), and the kill -9 above resumed exactly from them.
    offsets = (shared or checkpoints_in(tmp_path / "state"))[0] / "offsets"
    assert [p.name for p in offsets.iterdir() if p.name.isdigit()]
    assert not [p.name for p in offsets.iterdir() if p.name.endswith(".crc")]


def test_restart_without_checkpoint_never_republishes(source_server, nats_server, tmp_path: Path) -> None:
    """Beyond the duplicate window: a lost checkpoint must not copy everything again."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "EVENTS", ["events.>"]))
    run(publish(src, [(f"events.{i}", b"x" * 100, None) for i in range(2_000)]))
    cfg = write_config(
        tmp_path / "sr.yaml", "dc1", [{"stream": "EVENTS", "source_url": src, "target_url": dst}]
    )
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "EVENTS")) >= 2_000, SLOW_S, "first copy", rep)
    finally:
        assert rep.stop() == 0
    # Checkpoint gone: the start position must come from the target's Choria-SR-Source tail.
    import shutil

    shutil.rmtree(tmp_path / "state")
    run(publish(src, [(f"events.{i}", b"y" * 100, None) for i in range(500)]))
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "EVENTS")) >= 2_500, SLOW_S, "copy of the new messages", rep)
        threading.Event().wait(3)  # give a wrong re-publish time to show up
    finally:
        assert rep.stop() == 0
    assert run(count(dst, "EVENTS")) == 2_500
    assert "already holds source sequences up to 2000" in rep.output()


def test_a_target_refusing_for_a_while_loses_nothing(source_server, nats_server, tmp_path: Path) -> None:
    """Batches Spark has committed while their publishing was refused are published again,
    in order, once the target accepts them (the in-flight record, replicator.spark.inflight)."""
    from nats.js.api import DiscardPolicy

    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "ORDERS", ["orders.>"]))
    run(create_stream(dst, "ORDERS", ["orders.>"], max_msgs=2_500, discard=DiscardPolicy.NEW))
    items = [(f"orders.{i % 7}", registration(i, 300), None) for i in range(6_000)]
    run(publish(src, items))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [{"stream": "ORDERS", "source_url": src, "target_url": dst, "batch_max_messages": 1000}],
    )
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: "maximum messages exceeded" in rep.output(), SLOW_S, "the target refusing", rep)
        assert run(count(dst, "ORDERS")) == 2_500

        async def lift_limit() -> None:
            nc = await nats.connect(dst)
            js = nc.jetstream()
            conf = (await js.stream_info("ORDERS")).config
            conf.max_msgs = -1
            await js.update_stream(conf)
            await nc.close()

        run(lift_limit())
        wait_for(lambda: run(count(dst, "ORDERS")) >= len(items), SLOW_S, "the rest copied", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    seqs = copied_source_sequences(dst, "ORDERS")
    assert seqs == list(range(1, len(items) + 1)), "every message once, in source order"
    assert "left in flight" in rep.output()


def test_a_recreated_source_stream_is_copied_whole_after_its_earlier_lifes_copies(
    source_server, nats_server, tmp_path: Path
) -> None:
    """The source stream is deleted and created again (same name) and its checkpoint removed,
    as docs/operations.md says: its new messages are all copied, though the target's tail holds
    copies of the old stream's with higher sequences. Before the fix the old copies were taken
    for the new stream's, and its first 2,000 messages were skipped."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "EVENTS", ["events.>"]))
    run(publish(src, [(f"events.{i}", b"old" * 30, None) for i in range(2_000)]))
    cfg = write_config(
        tmp_path / "sr.yaml", "dc1", [{"stream": "EVENTS", "source_url": src, "target_url": dst}]
    )
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "EVENTS")) >= 2_000, SLOW_S, "the old stream's copy", rep)
    finally:
        assert rep.stop() == 0, rep.output()

    recreate_events(src)
    run(publish(src, [(f"events.{i}", b"new" * 30, None) for i in range(3_000)]))
    import shutil

    shutil.rmtree(tmp_path / "state")
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "EVENTS")) >= 5_000, SLOW_S, "the new stream's copy", rep)
        threading.Event().wait(2)
    finally:
        assert rep.stop() == 0, rep.output()
    seqs = new_copies_sequences(dst)
    assert seqs == list(range(1, 3_001))


def test_a_record_left_in_flight_by_a_deleted_source_stream_costs_the_new_stream_nothing(
    source_server, nats_server, tmp_path: Path
) -> None:
    """A run killed mid-batch leaves its range in flight; the source stream is then deleted and
    created again with fewer messages, and its checkpoint removed as docs/operations.md says.
    The old range is not this stream's: every new message is copied (before the fix the start
    took the old range as handled, and the query began after it: all 1,000 were skipped)."""
    import shutil

    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "EVENTS", ["events.>"]))
    run(publish(src, [(f"events.{i}", b"old" * 30, None) for i in range(2_000)]))
    cfg = write_config(
        tmp_path / "sr.yaml", "dc1", [{"stream": "EVENTS", "source_url": src, "target_url": dst}]
    )
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "EVENTS")) >= 2_000, SLOW_S, "the old stream's copy", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    entry = tmp_path / "state" / "EVENTS_dc1"
    assert (entry / "checkpoint").is_dir()
    # What a kill -9 during the old stream's last batch leaves (its copies had landed).
    old_created = run(stream_created_us(src, "EVENTS"))
    left = {"first_seq": 1_501, "last_seq": 2_000, "unchained": False, "since_ns": time.time_ns(),
            "source_created_us": old_created}  # fmt: skip
    (entry / "inflight.json").write_text(json.dumps(left))

    recreate_events(src)
    run(publish(src, [(f"events.{i}", b"new" * 30, None) for i in range(1_000)]))
    shutil.rmtree(entry / "checkpoint")
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "EVENTS")) >= 3_000, SLOW_S, "the new stream's copy", rep)
        threading.Event().wait(2)
    finally:
        assert rep.stop() == 0, rep.output()
    seqs = new_copies_sequences(dst)
    assert seqs == list(range(1, 1_001))
    assert "dropping the record of source sequences 1501-2000 left in flight" in rep.output()


@pytest.fixture(params=[1, 3], ids=["single-source", "r3-source"])
def source_of_each_kind(request: pytest.FixtureRequest) -> Iterator[tuple[NatsCluster, int]]:
    """The source on one server, or on a 3-server cluster with R3 streams (a clustered stream's
    creation is stamped by the meta leader). Yields the cluster and the replicas."""
    with nats_cluster(request.param, "dc1") as c:
        yield c, request.param


@pytest.mark.parametrize("when", ["stopped", "running"])
def test_a_source_stream_created_again_past_its_checkpoint_is_refused_not_read_on(
    source_of_each_kind: tuple[NatsCluster, int], nats_server, tmp_path: Path, when: str
) -> None:
    """The source stream is deleted and created again, and refilled past where the kept
    checkpoint stopped, while the replicator is stopped or while it runs. Its new messages are
    numbered from 1 anew: resuming at the old offset copied 2,001-3,000 and skipped 1-2,000
    without a word. Now the entry refuses in one line, copies nothing of the new stream, and
    once the checkpoint is removed (as that line says) copies it whole, in order."""
    import shutil

    source, replicas = source_of_each_kind
    src, dst = source.url, nats_server.url
    run(create_stream(src, "EVENTS", ["events.>"], num_replicas=replicas))
    run(publish(src, [(f"events.{i}", b"old" * 30, None) for i in range(2_000)]))
    cfg = write_config(
        tmp_path / "sr.yaml", "dc1", [{"stream": "EVENTS", "source_url": src, "target_url": dst}]
    )
    refused = "was deleted and created again"
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "EVENTS")) >= 2_000, SLOW_S, "the old stream's copy", rep)
        if when == "stopped":
            assert rep.stop() == 0, rep.output()
        recreate_events(src, replicas)
        run(publish(src, [(f"events.{i}", b"new" * 30, None) for i in range(3_000)]))
        if when == "stopped":
            rep = start_replicator(cfg)
        wait_for(lambda: refused in rep.output(10**9), SLOW_S, "the entry refusing the new stream", rep)
        threading.Event().wait(3)
        assert run(count(dst, "EVENTS")) == 2_000  # nothing of the new stream, in no order
    finally:
        rep.stop()
    line = next(x for x in rep.output(10**9).splitlines() if refused in x)
    assert "remove the checkpoint" in line or "remove the entry's checkpoint" in line, line

    shutil.rmtree(tmp_path / "state" / "EVENTS_dc1" / "checkpoint")
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "EVENTS")) >= 5_000, SLOW_S, "the new stream's copy", rep)
        threading.Event().wait(2)
    finally:
        assert rep.stop() == 0, rep.output()
    seqs = new_copies_sequences(dst)
    assert seqs == list(range(1, 3_001))


@pytest.mark.parametrize("mode", ["copy", "sampled"])
def test_a_source_recreated_while_a_batch_waits_for_its_retry_is_refused_at_the_retry(
    source_of_each_kind: tuple[NatsCluster, int], nats_server, tmp_path: Path, mode: str
) -> None:
    """The target refuses a copy (too big), so the entry retries with that batch still to do;
    meanwhile the source stream is deleted and created again, and the target fixed. The retry
    must refuse the new stream, as a restart does: before the fix it took the batch's range
    from the new stream (in flight, or replayed by Spark without asking the stream anew) and
    published its messages as copies of the old ones."""
    from nats.js.api import StreamConfig

    source, replicas = source_of_each_kind
    src, dst = source.url, nats_server.url
    run(create_stream(src, "EVENTS", ["events.>"], num_replicas=replicas))
    run(publish(src, [(f"events.{i}", json.dumps({"sender": f"n{i}", "pad": "o" * (20_000 if i == 49 else 90)}).encode(), None)
                      for i in range(100)]))  # fmt: skip
    small = StreamConfig(name="EVENTS", subjects=["events.>"], max_msg_size=8192, allow_direct=True)
    run(create_stream(dst, "EVENTS", ["events.>"], max_msg_size=8192))
    entry: dict[str, Any] = {"stream": "EVENTS", "source_url": src, "target_url": dst}
    if mode == "sampled":
        entry.update(inspect_field="sender", inspect_duration="1h")
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [entry])
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: "source sequence 50 is" in rep.output(), SLOW_S, "the refusal of sequence 50", rep)
        # Deleted first: once an attempt failed on its absence, every start after it asks for
        # the stream before its query runs, so the new stream below is met by a retry, not
        # raced by one.
        gone = rep.output(10**9).count("does not exist")
        delete_events(src)
        wait_for(
            lambda: rep.output(10**9).count("does not exist") > gone,
            SLOW_S,
            "an attempt without the stream",
            rep,
        )
        recreate_events(src, replicas)
        run(publish(src, [(f"events.{i}", json.dumps({"sender": f"n{i}", "new": 1}).encode(), None)
                          for i in range(100)]))  # fmt: skip
        run(update_stream(dst, dataclasses.replace(small, max_msg_size=65536)))
        wait_for(lambda: "deleted and created again" in rep.output(10**9) or run(count(dst, "EVENTS")) > 49,
                 SLOW_S, "the retry", rep)  # fmt: skip
        threading.Event().wait(3)  # a retry that copied would have copied more by now
    finally:
        assert rep.stop() == 0, rep.output()
    got = run(read_all(dst, "EVENTS"))
    assert [m.data for m in got if b'"new"' in m.data] == [], (
        "the new stream's messages were copied as the old's"
    )
    assert copied_source_sequences(dst, "EVENTS") == list(range(1, 50))
    assert "deleted and created again" in rep.output(10**9)


def new_copies_sequences(dst: str) -> list[int]:
    """The source sequences of the target's copies of the new EVENTS stream, in stored order."""
    new = [m for m in run(read_all(dst, "EVENTS")) if m.data.startswith(b"new")]
    return [parse_source_header(first_value(m.headers, SOURCE_HEADER)).sequence for m in new]  # type: ignore[union-attr]


def delete_events(src: str) -> None:
    """The source stream EVENTS deleted (nothing happens if it is gone already)."""

    async def delete() -> None:
        nc = await nats.connect(src.split(","))
        try:
            await nc.jetstream().delete_stream("EVENTS")
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await nc.close()

    run(delete())


def recreate_events(src: str, replicas: int = 1) -> None:
    """The source stream EVENTS deleted and created again, empty, with another creation time."""
    delete_events(src)
    threading.Event().wait(1.1)  # a creation time in another second than the old stream's
    run(create_stream(src, "EVENTS", ["events.>"], num_replicas=replicas))


async def stream_created_us(url: str, stream: str) -> int:
    nc = await nats.connect(url.split(","))
    try:
        return created_us(await nc.jetstream().stream_info(stream))
    finally:
        await nc.close()


@pytest.mark.parametrize("mode", ["copy", "sampled"])
def test_a_restart_with_nothing_new_reports_every_message_handled(
    source_server, nats_server, tmp_path: Path, mode: str
) -> None:
    """`stream_sequence` is the last source sequence handled (docs/operations.md): a restart, or
    a standby taking over a checkpoint its leader had committed to the source's end, reports it
    from where it starts, not only after a batch with messages (in CI a sampled takeover whose
    leader had read the whole fleet reported nothing handled for minutes)."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"]))
    run(publish(src, [(f"reg.n{i % 40}", registration(i % 40, 500 + i), None) for i in range(400)]))
    entry: dict[str, Any] = {"stream": "REG", "source_url": src, "target_url": dst}
    if mode == "sampled":
        entry |= {"inspect_field": "sender", "inspect_duration": "1h", "size_trigger": 100_000}
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [entry])
    run_until_handled(cfg, src, "REG")
    copies = run(count(dst, "REG"))
    assert copies == (400 if mode == "copy" else 40)

    run_until_handled(cfg, src, "REG")
    assert run(count(dst, "REG")) == copies  # and nothing copied twice
