"""Copies made live, beside the running query (`copy_live`, replicator.live_copies): every
message lands once and in order, the query's checkpoint still records how far the source is
handled, a configured start is kept, a refused copy holds everything after it until the target
takes it, and a kill -9 among live copies loses nothing. On single servers and on 3-server
clusters with R3 streams."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import time
from pathlib import Path

import nats
import pytest
from helpers import (
    SLOW_S,
    bury_our_last_copy,
    checkpoints_in,
    copied_source_sequences,
    create_stream,
    delete_stream,
    our_copies,
    publish,
    registration,
    restart_until_handled,
    run,
    start_replicator,
    stored_on,
    update_stream,
    wait_for,
    wait_handled,
    write_config,
)
from nats.js.api import StreamConfig, StreamInfo
from nats_servers import NatsCluster
from stream_backup import StreamBackup, backup_stream, restore_stream

from harness.faultproxy import FaultProxy
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.live_mark import read_live_mark
from replicator.nats.jetstream import created_us
from replicator.spark.checkpoint import committed_end, open_checkpoint

pytestmark = pytest.mark.integration

LIVE = "copying new messages live, beside the query"


def _trickle(url: str, first: int, n: int, rounds: int, big: int = -1) -> None:
    """Messages first..first+n-1 of subjects orders.<i % 13>, in `rounds` publishes a tenth of
    a second apart (message `big` is 20 KB)."""
    per = max(1, n // rounds)
    for start in range(first, first + n, per):
        run(publish(url, [(f"orders.{i % 13}", registration(i, 20_000 if i == big else 500), None)
                          for i in range(start, min(first + n, start + per))]))  # fmt: skip
        time.sleep(0.1)


def _entry(src: str, dst: str, **more: object) -> dict[str, object]:
    return {"stream": "ORDERS", "source_url": src, "target_url": dst, "copy_live": True, **more}


def _copied_live(log: str, entry: str = "ORDERS/dc1") -> int:
    """How many messages the entry's live copies published, as their last line says."""
    found = re.findall(rf"{entry}: copied (\d+) messages live", log)
    return sum(int(n) for n in found)


def test_a_trickle_is_copied_live_once_in_order_and_the_checkpoint_follows(
    source_like_target: NatsCluster, target_of_each_kind: tuple[NatsCluster, int], tmp_path: Path
) -> None:
    target, r = target_of_each_kind
    src, dst = source_like_target.url, target.url
    run(create_stream(src, "ORDERS", ["orders.>"], num_replicas=r))
    run(publish(src, [(f"orders.{i % 13}", registration(i, 500), None) for i in range(2_000)]))
    # A second entry copies one subject from sequence 2,300 on, beyond the source's end as it
    # starts: nothing is copied ahead for it, and its live copies must begin there, not at 1.
    # It leaves copy_live unset, the default: on for an entry that copies ahead.
    default = {k: v for k, v in _entry(src, dst).items() if k != "copy_live"}
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [
        _entry(src, dst),
        {**default, "name": "one", "filter_subject": "orders.1", "start_sequence": 2_300, "target_stream": "ONE",
         "target_subject_prefix": "one"},
    ])  # fmt: skip
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        wait_for(lambda: rep.output(10**9).count(LIVE) == 2, SLOW_S, "both entries copying live", rep)
        _trickle(src, 2_000, 600, rounds=30)
        wait_handled(rep, src, "ORDERS")
        one = [q for q in range(2_300, 2_601) if (q - 1) % 13 == 1]
        wait_for(lambda: run(count(dst, "ONE")) >= len(one), SLOW_S, "the filtered entry's copies", rep)
        # The query's batches record what was copied live (once a second).
        ckpts = {p.parent.name: p for p in checkpoints_in(tmp_path / "state")}
        assert len(ckpts) == 2, ckpts
        wait_for(
            lambda: all(committed_end(open_checkpoint(str(p), None)) == 2_601 for p in ckpts.values()),
            SLOW_S, "the checkpoints to record the last message", rep,
        )  # fmt: skip
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "ORDERS") == list(range(1, 2_601)), "each once, in order"
    assert copied_source_sequences(dst, "ONE") == one
    log = rep.output(10**9)
    assert "Traceback" not in log and "live copies stopped" not in log, log
    assert "recreated" not in log, log  # the filtered entry waits for its start, 2,300
    # The live copies made the trickle's copies, not the query's batches. A batch may take one
    # the live copies had not yet handed to a publish (each is copied once, as checked above):
    # it happened once in 600 on a loaded CI machine.
    assert _copied_live(log) >= 570 and _copied_live(log, "ORDERS/one") >= len(one) - 2, log


def test_a_copy_refused_while_copying_live_holds_the_rest_until_the_target_takes_it(
    source_like_target: NatsCluster, target_of_each_kind: tuple[NatsCluster, int], tmp_path: Path
) -> None:
    target, r = target_of_each_kind
    src, dst = source_like_target.url, target.url
    run(create_stream(src, "ORDERS", ["orders.>"], num_replicas=r))
    run(publish(src, [(f"orders.{i % 13}", registration(i, 500), None) for i in range(1_000)]))
    small = StreamConfig(
        name="ORDERS", subjects=["orders.>"], max_msg_size=8192, allow_direct=True, num_replicas=r
    )
    run(create_stream(dst, "ORDERS", ["orders.>"], max_msg_size=8192, num_replicas=r))
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [_entry(src, dst)])
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        wait_for(lambda: LIVE in rep.output(), SLOW_S, "copying live", rep)
        wait_for(lambda: run(count(dst, "ORDERS")) == 1_000, SLOW_S, "the backlog's copies", rep)
        # Live messages 1,001-1,400; 1,201 is 20 KB, above what the target takes.
        _trickle(src, 1_000, 400, rounds=20, big=1_200)
        wait_for(lambda: "source sequence 1201 is" in rep.output(), SLOW_S, "the refusal logged", rep)
        time.sleep(2)  # the query's batches and the live copies' retries meanwhile
        assert copied_source_sequences(dst, "ORDERS") == list(range(1, 1_201)), (
            "nothing after the refused copy"
        )
        # The operator raises the limit; the next retry goes on from the refused message.
        run(update_stream(dst, dataclasses.replace(small, max_msg_size=65536)))
        wait_handled(rep, src, "ORDERS")
        _trickle(src, 1_400, 100, rounds=5)  # and the live copies start again with the query
        wait_handled(rep, src, "ORDERS")
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "ORDERS") == list(range(1, 1_501)), "each once, in order"
    log = rep.output(10**9)
    assert _copied_live(log) >= 200, "the copies up to the refused one were made live"
    assert log.count(LIVE) >= 2, "the live copies started again after the retry"


@pytest.mark.parametrize("servers", [1, 3], ids=["single", "r3"])
def test_a_kill_9_among_live_copies_then_a_restart_gives_an_exact_copy(tmp_path: Path, servers: int) -> None:
    from nats_servers import nats_cluster

    with nats_cluster(servers, "source") as source, nats_cluster(servers, "target") as target:
        src, dst = source.url, target.url
        run(create_stream(src, "ORDERS", ["orders.>"], num_replicas=servers))
        run(create_stream(dst, "ORDERS", ["orders.>"], num_replicas=servers))
        run(publish(src, [(f"orders.{i % 13}", registration(i, 500), None) for i in range(500)]))
        # The replicator reaches the target through a proxy: stalled, it holds live copies sent
        # and not yet stored, so the kill falls among them.
        with FaultProxy(target.servers[0].port) as link:
            cfg = write_config(tmp_path / "sr.yaml", "dc1", [_entry(src, link.url)])
            rep = start_replicator(cfg)
            rep.wait_ready(SLOW_S)
            wait_for(lambda: LIVE in rep.output(), SLOW_S, "copying live", rep)
            wait_for(lambda: run(count(dst, "ORDERS")) == 500, SLOW_S, "the backlog's copies", rep)
            link.stall()
            _trickle(src, 500, 300, rounds=10)
            rep.kill9()
            link.cut()
            assert run(count(dst, "ORDERS")) < 800
            link.restore()
            _trickle(src, 800, 200, rounds=4)  # more while it is down
            rep = start_replicator(cfg)
            try:
                rep.wait_ready(SLOW_S)
                wait_handled(rep, src, "ORDERS")
                _trickle(src, 1_000, 200, rounds=4)  # and live again after the restart
                wait_handled(rep, src, "ORDERS")
            finally:
                assert rep.stop() == 0, rep.output()
        assert copied_source_sequences(dst, "ORDERS") == list(range(1, 1_201)), "each once, in order"
        assert "left in flight" in rep.output(10**9), "the kill fell among live copies in flight"


@pytest.mark.parametrize("chain", [True, False], ids=["chained", "unchained"])
@pytest.mark.parametrize("servers", [1, 3], ids=["single", "r3"])
def test_a_restart_after_live_copies_the_target_no_longer_shows_publishes_none_again(
    tmp_path: Path, servers: int, chain: bool
) -> None:
    """Copied live, the target runs ahead of Spark's checkpoint. A start finds our last copy in
    the target's tail, but not once another writer has stored 10,000 messages after it; past
    the target's duplicate window, resuming from the checkpoint would store copies again.
    Unchained too (`chain_copies: false`, as for a target others write to): its acks were not
    taken as a target sequence known stored, so no mark was written and the copies went again."""
    from nats_servers import nats_cluster

    with nats_cluster(servers, "source") as source, nats_cluster(servers, "target") as target:
        _restart_after_live_copies_past_the_duplicate_window(source.url, target.url, servers, tmp_path, chain)


@pytest.mark.parametrize("how", ["deleted", "restored"])
@pytest.mark.parametrize("servers", [1, 3], ids=["single", "r3"])
def test_the_live_copies_mark_is_not_kept_to_once_the_target_lost_the_copy_it_names(
    tmp_path: Path, servers: int, how: str
) -> None:
    """The mark names one of our copies and where the target stored it. A target that no longer
    holds it there may lack copies the mark covers: restored from a backup taken before them
    (the server's own snapshot and restore), its sequence since taken past the mark's by other
    writers; or the copy deleted. The start resumes from the checkpoint instead, storing some
    copies twice rather than losing any. nats-server 2.15's restore gives the stream a new
    creation time, which alone keeps the start from the mark; the deleted copy is what tests
    the look for the copy."""
    from nats_servers import nats_cluster

    with nats_cluster(servers, "source") as source, nats_cluster(servers, "target") as target:
        _restart_after_live_copies_past_the_duplicate_window(
            source.url, target.url, servers, tmp_path, chain=True, lose_marked_copy=how
        )


def test_a_live_copies_mark_of_an_earlier_version_is_not_kept_to(tmp_path: Path) -> None:
    """A mark written before 2026-12-06 (no `copy_seq`: it names none of our copies, so a target
    restored without them could not be told) is not kept to after an upgrade: the start says
    so, and copies the target already held may be stored again, none lost."""
    from nats_servers import nats_cluster

    with nats_cluster(1, "source") as source, nats_cluster(1, "target") as target:
        _restart_after_live_copies_past_the_duplicate_window(
            source.url, target.url, 1, tmp_path, chain=True, lose_marked_copy="earlier-version"
        )


def _restart_after_live_copies_past_the_duplicate_window(
    src: str, dst: str, servers: int, tmp_path: Path, chain: bool, lose_marked_copy: str = ""
) -> None:
    run(create_stream(src, "ORDERS", ["orders.>"], num_replicas=servers))
    run(create_stream(dst, "ORDERS", ["orders.>", "other.>"], duplicate_window=1.0, num_replicas=servers))
    # Batches of at most 1,000: the query's checkpoint surely lags the live copies at the stop.
    entry = _entry(src, dst, batch_max_messages=1_000, chain_copies=chain)
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [entry])
    backup: StreamBackup | None = None
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        wait_for(lambda: LIVE in rep.output(), SLOW_S, "copying live", rep)

        def copied_live(first: int, end: int) -> None:
            run(publish(src, [(f"orders.{i % 13}", registration(i, 200), None) for i in range(first, end)]))
            wait_for(lambda: run(stored_on(dst, "ORDERS", "orders.>")) >= end, SLOW_S, "the live copies", rep)

        # 30,000 at once: copied live in seconds, recorded by the query 1,000 a second at most.
        # To be restored, the target is backed up before the last copy: the checkpoint, behind
        # the live copies, ends within the backup (a target restored to before the checkpoint
        # lacks what the checkpoint says is handled, with or without a mark).
        if lose_marked_copy == "restored":
            copied_live(0, 29_999)
            backup = run(backup_stream(dst, "ORDERS"))
            copied_live(29_999, 30_000)
        else:
            copied_live(0, 30_000)
    finally:
        assert rep.stop() == 0, rep.output()
    [ckpt] = checkpoints_in(tmp_path / "state")
    recorded = committed_end(open_checkpoint(str(ckpt), None)) or 0
    assert recorded < 30_001, "the checkpoint had caught up with the target: nothing here was tested"
    mark = read_live_mark(ckpt.parent / "live-copied.json")
    assert mark is not None and mark.seq == mark.copy_seq == 30_000 and mark.target_seq >= 30_000, mark
    copy_gone = f"no longer holds our copy of source sequence 30000 at its sequence {mark.target_seq}"
    if lose_marked_copy == "earlier-version":
        # As the version before 31c48f4 wrote it: a target sequence, no copy named.
        earlier = {k: v for k, v in dataclasses.asdict(mark).items() if k != "copy_seq"}
        (ckpt.parent / "live-copied.json").write_text(json.dumps(earlier))
        copy_gone = "it names none of our copies (written by a version before 2026-12-06)"
    if backup is not None:
        run(delete_stream(dst, "ORDERS"))
        restored = run(restore_stream(dst, backup))
        assert restored["state"]["last_seq"] < mark.target_seq, restored["state"]
        # nats-server 2.15's restore gives the stream a new creation time; one that kept it
        # would leave the copy's absence to tell.
        if created_us(StreamInfo.from_response(restored)) != mark.target_created_us:
            copy_gone = "the target stream was created again or restored from a backup since"
    bury_our_last_copy(dst)
    if lose_marked_copy == "deleted":
        run(_delete_message(dst, "ORDERS", mark.target_seq))
    run(publish(src, [(f"orders.{i % 13}", registration(i, 200), None) for i in range(30_000, 30_100)]))
    rep = restart_until_handled(cfg, src)
    ours = our_copies(dst)
    if lose_marked_copy:
        assert sorted(set(ours)) == list(range(1, 30_101)), "every copy there, the lost ones again"
        assert copy_gone in rep.output(10**9)
        return
    assert ours == list(range(1, 30_101)), f"{len(ours) - 30_100} copies stored again"
    assert "the last run's live copies reached source sequence 30000" in rep.output(10**9)


async def _delete_message(url: str, stream: str, seq: int) -> None:
    nc = await nats.connect(url.split(","))
    try:
        await nc.jetstream().delete_msg(stream, seq)
    finally:
        await nc.close()


@pytest.mark.parametrize("servers", [1, 3], ids=["single", "r3"])
def test_the_live_copies_mark_is_not_kept_to_once_the_target_stream_was_created_again(
    tmp_path: Path, servers: int
) -> None:
    """The mark says how far a target stream acknowledged our copies; a new target stream of
    the same name holds none of them, and gets what the checkpoint says, as without the mark."""
    from nats_servers import nats_cluster

    with nats_cluster(servers, "source") as source, nats_cluster(servers, "target") as target:
        _mark_with_the_target_stream_created_again(source.url, target.url, servers, tmp_path)


def _mark_with_the_target_stream_created_again(src: str, dst: str, servers: int, tmp_path: Path) -> None:
    run(create_stream(src, "ORDERS", ["orders.>"], num_replicas=servers))
    # Batches of at most 1,000: the query's checkpoint surely lags the live copies at the stop.
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [_entry(src, dst, batch_max_messages=1_000)])
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        wait_for(lambda: LIVE in rep.output(), SLOW_S, "copying live", rep)
        run(publish(src, [(f"orders.{i % 13}", registration(i, 200), None) for i in range(30_000)]))
        wait_for(lambda: run(count(dst, "ORDERS")) >= 30_000, SLOW_S, "the live copies", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    [ckpt] = checkpoints_in(tmp_path / "state")
    recorded = committed_end(open_checkpoint(str(ckpt), None)) or 0
    assert 0 < recorded < 30_001, "the checkpoint had caught up with the target: nothing here was tested"
    mark = read_live_mark(ckpt.parent / "live-copied.json")
    assert mark is not None and mark.seq == 30_000, "no mark to refuse: nothing here was tested"

    run(delete_stream(dst, "ORDERS"))
    rep = start_replicator(cfg)  # creates the target stream again
    try:
        rep.wait_ready(SLOW_S)
        wait_handled(rep, src, "ORDERS")
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "ORDERS") == list(range(recorded, 30_001))
    assert "live copies reached" not in rep.output(10**9)


def test_copy_live_unset_copies_live_only_from_a_source_with_direct_gets(
    source_server: NatsCluster, nats_server: NatsCluster, tmp_path: Path
) -> None:
    """The default: live copies where each new message costs a ring and a direct get. A source
    without allow_direct (each read would make a consumer) is left to the query's batches,
    with a line that says so, unless copy_live is true."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "DIRECT", ["direct.>"]))
    run(create_stream(src, "PLAIN", ["plain.>"], allow_direct=False))
    run(create_stream(src, "FORCED", ["forced.>"], allow_direct=False))
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [
        {"stream": name, "source_url": src, "target_url": dst, **more}
        for name, more in (("DIRECT", {}), ("PLAIN", {}), ("FORCED", {"copy_live": True}))
    ])  # fmt: skip
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        wait_for(lambda: rep.output(10**9).count(LIVE) == 2, SLOW_S, "two entries copying live", rep)
        for name in ("DIRECT", "PLAIN", "FORCED"):
            run(publish(src, [(f"{name.lower()}.{i % 3}", registration(i, 500), None) for i in range(300)]))
        for name in ("DIRECT", "PLAIN", "FORCED"):
            wait_handled(rep, src, name)
    finally:
        assert rep.stop() == 0, rep.output()
    for name in ("DIRECT", "PLAIN", "FORCED"):
        assert copied_source_sequences(dst, name) == list(range(1, 301)), name
    log = rep.output(10**9)
    assert (
        f"DIRECT/dc1: {LIVE}" in log and f"FORCED/dc1: {LIVE}" in log and f"PLAIN/dc1: {LIVE}" not in log
    ), log
    assert (
        "PLAIN/dc1: the query's batches make the copies: live copies (copy_live) need a source stream" in log
    )
    assert _copied_live(log, "DIRECT/dc1") > 0 and _copied_live(log, "FORCED/dc1") > 0, log


def test_a_burst_of_large_messages_copied_live_is_read_a_chunks_bytes_at_a_time_once_in_order(
    source_server: NatsCluster, nats_server: NatsCluster, tmp_path: Path
) -> None:
    """A few new messages are read in the same trip as the stream's end (replicator.live_copies,
    _look), reading on only until a read chunk's bytes are passed: 24 messages of 1 MB found at
    once, 24 MB against a chunk's 16 MiB, are read in two parts (17 and 7, seen in a one-off
    run with a log line there), and each lands once, in order, intact. The query's batch, held
    by the pause too, may take some of them instead: the copy must be exact either way."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "ORDERS", ["orders.>"]))
    run(publish(src, [(f"orders.{i % 13}", registration(i, 500), None) for i in range(100)]))
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [_entry(src, dst)])
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        wait_for(lambda: LIVE in rep.output(10**9), SLOW_S, "copying live", rep)
        wait_handled(rep, src, "ORDERS")
        # The driver paused while they are published, so that its next look finds all 24.
        assert rep.proc is not None
        os.kill(rep.proc.pid, signal.SIGSTOP)
        try:
            run(
                publish(
                    src, [(f"orders.{i % 13}", bytes([i % 251]) * 1_000_000, None) for i in range(100, 124)]
                )
            )
        finally:
            os.kill(rep.proc.pid, signal.SIGCONT)
        wait_handled(rep, src, "ORDERS")
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "ORDERS") == list(range(1, 125)), "each once, in order"
    copies = run(read_all(dst, "ORDERS"))
    assert [m.data for m in copies[100:]] == [bytes([i % 251]) * 1_000_000 for i in range(100, 124)]
    log = rep.output(10**9)
    assert "Traceback" not in log and "live copies stopped" not in log, log
