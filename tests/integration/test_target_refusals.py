"""A target that refuses a message: the copy stops right before it (nothing after it lands, so
the target never holds a gap), says which sequence and which limit, and continues exactly once
the target takes it. A target with another writer is still copied exactly and in order. Both
run on single servers and on 3-server clusters with R3 streams (refusals come from the stream's
leader, acks after replication)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    SLOW_S,
    copied_source_sequences,
    create_stream,
    publish,
    registration,
    run,
    start_replicator,
    stored_on,
    update_stream,
    wait_for,
    wait_handled,
    write_config,
)
from nats.js.api import StreamConfig
from nats_servers import NatsCluster

from harness.process import ReplicatorProcess
from harness.streams import count_messages as count

pytestmark = pytest.mark.integration


def test_a_refused_message_stops_the_copy_before_it_until_the_target_takes_it(
    source_like_target: NatsCluster, target_of_each_kind: tuple[NatsCluster, int], tmp_path: Path
) -> None:
    target, r = target_of_each_kind
    src, dst = source_like_target.url, target.url
    run(create_stream(src, "S", ["s.>"], num_replicas=r))
    # 3,000 ~1 KB messages; sequence 1,500 is 20 KB; from 2,001 on some go to s.b.*.
    items = [(f"s.a.{i % 7}", registration(i, 20_000 if i == 1499 else 1000), None) for i in range(2000)]
    items += [(f"s.{'b' if i % 5 == 0 else 'a'}.{i % 7}", registration(i), None) for i in range(2000, 3000)]
    run(publish(src, items))
    big = StreamConfig(name="BIG", subjects=["s.>"], max_msg_size=8192, allow_direct=True, num_replicas=r)
    narrow = StreamConfig(name="NARROW", subjects=["n.s.a.>"], allow_direct=True, num_replicas=r)
    run(create_stream(dst, "BIG", ["s.>"], max_msg_size=8192, num_replicas=r))
    run(create_stream(dst, "NARROW", ["n.s.a.>"], num_replicas=r))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [
            {"name": "big", "stream": "S", "source_url": src, "target_url": dst, "target_stream": "BIG",
             "batch_max_messages": 700},
            {"name": "narrow", "stream": "S", "source_url": src, "target_url": dst, "target_stream": "NARROW",
             "target_subject_prefix": "n", "batch_max_messages": 700},
        ],
    )  # fmt: skip
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: "source sequence 1500 is" in rep.output(), SLOW_S, "the size refusal logged", rep)
        wait_for(lambda: "source sequence 2001 would be copied to subject n.s.b.5" in rep.output(), SLOW_S,
                 "the subject refusal logged", rep)  # fmt: skip
        log = rep.output(10**9)
        assert "above the max_msg_size of the target stream (8192 bytes)" in log
        assert "which target stream NARROW does not hold (its subjects: n.s.a.>)" in log
        assert "Traceback" not in log and "\tat org.apache" not in log  # one line per refusal
        assert copied_source_sequences(dst, "BIG") == list(range(1, 1500))
        assert copied_source_sequences(dst, "NARROW") == list(range(1, 2001))

        # The operator fixes the targets; the next retry continues from the refused message.
        run(update_stream(dst, dataclasses.replace(big, max_msg_size=65536)))
        run(update_stream(dst, dataclasses.replace(narrow, subjects=["n.s.>"])))
        wait_for(lambda: run(count(dst, "BIG")) == 3000 and run(count(dst, "NARROW")) == 3000, SLOW_S,
                 "the copies to finish", rep)  # fmt: skip
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "BIG") == list(range(1, 3001))
    assert copied_source_sequences(dst, "NARROW") == list(range(1, 3001))


# Another data centre's replicator, say: a process of its own, so that it keeps publishing
# while the test reads the target back (in the test's process it shared the GIL with those
# reads, and once sent nothing for the whole copy). Each message is acknowledged; it says
# "ready" after the first, and how many it sent once its stdin closes.
OTHER_WRITER = """
import asyncio, sys, threading, nats
async def main(url):
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    nc = await nats.connect(url.split(","))
    js, sent = nc.jetstream(), 0
    while not done.is_set():
        await js.publish("other.x", b"theirs")
        sent += 1
        if sent == 1:
            print("ready", flush=True)
        await asyncio.sleep(0.001)
    await nc.close()
    print(sent, flush=True)
asyncio.run(main(sys.argv[1]))
"""


def unchained_to_t(src: str, dst: str, tmp_path: Path, **target: Any) -> tuple[StreamConfig, Path]:
    """Target stream T (`target`: its settings) and the config of an unchained entry copying
    S to it in batches of up to 3,000."""
    cfg = StreamConfig(name="T", subjects=["s.>"], allow_direct=True, **target)
    run(create_stream(dst, "T", ["s.>"], **target))
    return cfg, write_config(tmp_path / "sr.yaml", "dc1", [
        {"stream": "S", "source_url": src, "target_url": dst, "target_stream": "T", "chain_copies": False,
         "batch_max_messages": 3_000},
    ])  # fmt: skip


def _killed_after_a_gap_and_started_again(cfg: Path, dst: str) -> ReplicatorProcess:
    """Start the replicator, wait until copy 1,500 is refused and copies after it are stored
    in target stream T (a gap), kill -9 it there, and start it again."""
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: "refused source sequence 1500" in rep.output(10**9), SLOW_S, "the refusal", rep)
        wait_for(
            lambda: max(copied_source_sequences(dst, "T"), default=0) > 1_500, SLOW_S, "copies after it", rep
        )
    finally:
        rep.kill9()
    return start_replicator(cfg)


def allow(dst: str, cfg: StreamConfig, setting: str) -> None:
    """The target's operator allows what it refused (a test's fix of the target)."""
    run(update_stream(dst, dataclasses.replace(cfg, **{setting: True})))


def test_two_refused_copies_filled_in_after_a_kill_9_do_not_push_out_the_newer_copy_on_their_subject(
    source_like_target: NatsCluster, target_of_each_kind: tuple[NatsCluster, int], tmp_path: Path
) -> None:
    """A target keeping two messages a subject: unchained copies 1,500 and 1,501 on subject s.x
    are refused (a per-message TTL the target does not allow yet) while 1,502, also on s.x, is
    stored. After a kill -9 the gap fill finds both missing below the target's last copy. Had
    they been stored in place, 1,500 would have been pushed out by 1,501 and 1,502: only 1,501
    goes again, and s.x keeps 1,502 and 1,501. Before the fix each was checked against the
    target alone (one later message on s.x, under the limit of two): both went again, and
    their copies pushed 1,502's out, the newest value on s.x lost."""
    target_cluster, r = target_of_each_kind
    src, dst = source_like_target.url, target_cluster.url
    run(create_stream(src, "S", ["s.>"], allow_msg_ttl=True, num_replicas=r))
    items: list[tuple[str, bytes, dict[str, str] | None]] = [
        (f"s.a.{i % 7}", registration(i, 600), None) for i in range(3_000)
    ]
    for i in (1_499, 1_500, 1_501):  # source sequences 1,500-1,502
        items[i] = ("s.x", registration(i, 600), {"Nats-TTL": "1h"} if i < 1_501 else None)
    run(publish(src, items))
    target, cfg = unchained_to_t(src, dst, tmp_path, max_msgs_per_subject=2, num_replicas=r)
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: "refused source sequence 1500" in rep.output(10**9), SLOW_S, "the refusal", rep)
        wait_for(lambda: 1_502 in copied_source_sequences(dst, "T"), SLOW_S, "1502 stored after it", rep)
    finally:
        rep.kill9()
    assert 1_501 not in copied_source_sequences(dst, "T")
    rep = start_replicator(cfg)
    try:
        # The gap fill publishes what it decided to: refused until the target allows the TTL.
        wait_for(
            lambda: re.search("refused source sequence 150[01]", rep.output(10**9)),
            SLOW_S,
            "a gap filled",
            rep,
        )
        allow(dst, target, "allow_msg_ttl")
        wait_for(lambda: 1_501 in copied_source_sequences(dst, "T"), SLOW_S, "1501 copied", rep)
        wait_handled(rep, src, "S")
    finally:
        assert rep.stop() == 0, rep.output()
    got = copied_source_sequences(dst, "T")
    assert [seq for seq in got if seq in (1_500, 1_501, 1_502)] == [
        1_502,
        1_501,
    ]  # 1501 after 1502: unchained
    last_two = {f"s.a.{k}": [i + 1 for i in range(3_000) if items[i][0] == f"s.a.{k}"][-2:] for k in range(7)}
    assert sorted(got) == sorted([1_501, 1_502, *(seq for seqs in last_two.values() for seq in seqs)])


def test_a_sampled_replay_counts_a_later_parts_copy_before_publishing_a_refused_one_again(
    source_like_target: NatsCluster, target_of_each_kind: tuple[NatsCluster, int], tmp_path: Path
) -> None:
    """A sampled entry, a target keeping two messages a subject. One batch copies sender x three
    times, all on reg.x: 1 (first seen, with a per-message TTL the target does not allow yet:
    refused), 2 (a size change: stored) and 303 (another size change, after 300 messages that
    are no copies, so read and published as a later part of the batch). Had 1 been stored in
    place, 2 and 303 would have pushed it out: Spark's replay of the failed batch must not
    publish it again. Before the fix the replay checked 1 against its own part only (one later
    message on reg.x, under the limit): published after 2, and 303 after it, reg.x lost 2."""
    target_cluster, r = target_of_each_kind
    src, dst = source_like_target.url, target_cluster.url
    run(create_stream(src, "REG", ["reg.>"], allow_msg_ttl=True, num_replicas=r))
    target = StreamConfig(
        name="REG", subjects=["reg.>"], allow_direct=True, max_msgs_per_subject=2, num_replicas=r
    )
    run(create_stream(dst, "REG", ["reg.>"], max_msgs_per_subject=2, num_replicas=r))

    def doc(pad: int) -> bytes:
        return json.dumps({"sender": "x", "pad": "x" * pad}).encode()

    run(publish(src, [
        ("reg.x", doc(0), {"Nats-TTL": "1h"}),
        ("reg.x", doc(500), None),
        *[("reg.x", doc(500), None) for _ in range(300)],  # the same size: no copies
        ("reg.x", doc(1000), None),
    ]))  # fmt: skip
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [
        {"stream": "REG", "source_url": src, "target_url": dst, "chain_copies": False,
         "inspect_field": "sender", "inspect_duration": "1h", "size_trigger": 100},
    ])  # fmt: skip
    rep = start_replicator(cfg)
    try:
        wait_for(
            lambda: 2 in copied_source_sequences(dst, "REG"), SLOW_S, "copy 2 stored after 1 refused", rep
        )
        # The replay publishes what it decided to: refused until the target allows the TTL.
        allow(dst, target, "allow_msg_ttl")
        wait_handled(rep, src, "REG")
    finally:
        assert rep.stop() == 0, rep.output()
    assert "refused source sequence 1:" in rep.output(10**9)  # what this test is about happened
    assert copied_source_sequences(dst, "REG") == [2, 303]


def test_a_target_with_another_writer_is_copied_exactly_and_in_order(
    source_like_target: NatsCluster, target_of_each_kind: tuple[NatsCluster, int], tmp_path: Path
) -> None:
    target, r = target_of_each_kind
    src, dst = source_like_target.url, target.url
    n = 20_000
    run(create_stream(src, "S", ["s.>"], num_replicas=r))
    run(publish(src, [(f"s.{i % 11}", registration(i, 500), None) for i in range(n)]))
    run(create_stream(dst, "FANIN", ["s.>", "other.>"], num_replicas=r))
    writer = subprocess.Popen([sys.executable, "-c", OTHER_WRITER, dst], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline() == "ready\n", "the other writer did not start"
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [
        {"stream": "S", "source_url": src, "target_url": dst, "target_stream": "FANIN", "batch_max_messages": 2000},
    ])  # fmt: skip
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(stored_on(dst, "FANIN", "s.>")) >= n, SLOW_S, "the copy", rep)
    finally:
        sent = writer.communicate(input="", timeout=30)[0]
        assert rep.stop() == 0, rep.output()
    assert writer.returncode == 0, "the other writer failed"
    theirs = int(sent)
    every = copied_source_sequences(dst, "FANIN")
    got = [seq for seq in every if seq > 0]  # -1: theirs
    assert got == list(range(1, n + 1)), (got[:20], got.index(1), got[got.index(1) - 3 : got.index(1) + 16])
    assert run(count(dst, "FANIN")) == n + theirs
    # What this test is about: their messages landed among our copies while we copied.
    between = every[every.index(1) : every.index(n)].count(-1)
    assert between > 0, "the other writer stored nothing while the copy ran: nothing here was tested"
    assert rep.output(10**9).count("has another writer") == 1  # operations.md: logged once


@pytest.mark.parametrize("per_subject", [0, 1], ids=["every-message", "last-per-subject"])
def test_an_unchained_copy_refused_mid_batch_is_not_skipped_after_a_kill_9(
    source_server, nats_server, tmp_path: Path, per_subject: int
) -> None:
    """Unchained copies (`chain_copies: false`, as for a target with other writers): copy 1,500
    is refused mid-batch by a check nothing foresees (a `Nats-Rollup` header the target does not
    permit) while the copies after it are stored. Killed while it retries, the replicator starts
    again with the target's last copy past 1,500: it must still publish 1,500 once the target
    takes it. Before the fix the restart resumed after the target's last copy and 1,500 was
    lost for good. A target that keeps one message a subject (`max_msgs_per_subject: 1`) and
    holds a later copy on 1,500's subject would have dropped 1,500 anyway: it is not published
    again after that later copy (an old value must not replace a newer one)."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "S", ["s.>"], allow_rollup_hdrs=True))
    items: list[tuple[str, bytes, dict[str, str] | None]] = [
        (f"s.a.{i % 7}", registration(i, 600), None) for i in range(3_000)
    ]
    # On a subject of its own, or (one message a subject) on one with later messages.
    subject = items[1_499][0] if per_subject else "s.rollup"
    items[1_499] = (subject, registration(1_499, 600), {"Nats-Rollup": "sub"})
    run(publish(src, items))
    target, cfg = unchained_to_t(src, dst, tmp_path, max_msgs_per_subject=per_subject or -1)
    rep = _killed_after_a_gap_and_started_again(cfg, dst)
    try:
        if per_subject:
            # default: a read of a last-per-subject stream being written can find every message of
            # the range it planned already replaced by later ones (not yet in that range).
            wait_for(
                lambda: max(copied_source_sequences(dst, "T"), default=0) == 3_000,
                SLOW_S,
                "the rest copied",
                rep,
            )
            wait_handled(rep, src, "S")
            assert "refused source sequence 1500" not in rep.output(10**9)
        else:
            wait_for(
                lambda: "refused source sequence 1500" in rep.output(10**9),
                SLOW_S,
                "1500 published again",
                rep,
            )
            allow(dst, target, "allow_rollup_hdrs")
            wait_for(lambda: run(count(dst, "T")) == 3_000, SLOW_S, "1500 copied", rep)
            assert "the target lacked 1 copies" in rep.output(10**9)
    finally:
        assert rep.stop() == 0, rep.output()
    got = copied_source_sequences(dst, "T")
    if per_subject:
        want = {f"s.a.{i % 7}": i + 1 for i in range(3_000)}  # the last source sequence a subject
        assert sorted(got) == sorted(want.values())
    else:
        assert sorted(got) == list(range(1, 3_001))  # each once; 1500 after the later ones (unchained)


def test_a_sampled_unchained_copy_refused_mid_batch_is_not_skipped_after_a_kill_9(
    source_like_target: NatsCluster, target_of_each_kind: tuple[NatsCluster, int], tmp_path: Path
) -> None:
    """The sampled form of the test above: 3,000 senders, each seen once (every message a
    copy), unchained; copy 1,500 is refused mid-batch while the copies after it are stored,
    and the replicator is killed while it retries. Spark replays the batch at the next start,
    which must publish 1,500 again once the target takes it. Before the fix a sampled entry
    kept what its failed publish sent in memory only: the restart published the replay above
    the target's last copy, and 1,500 was lost for good."""
    target_cluster, r = target_of_each_kind
    src, dst = source_like_target.url, target_cluster.url
    run(create_stream(src, "S", ["s.>"], allow_rollup_hdrs=True, num_replicas=r))
    items: list[tuple[str, bytes, dict[str, str] | None]] = [
        (f"s.n{i}", json.dumps({"sender": f"n{i}", "pad": "x" * 500}).encode(), None) for i in range(3_000)
    ]
    items[1_499] = ("s.rollup", items[1_499][1], {"Nats-Rollup": "sub"})  # source sequence 1,500
    run(publish(src, items))
    target = StreamConfig(name="T", subjects=["s.>"], allow_direct=True, num_replicas=r)
    run(create_stream(dst, "T", ["s.>"], num_replicas=r))
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [
        {"stream": "S", "source_url": src, "target_url": dst, "target_stream": "T", "chain_copies": False,
         "inspect_field": "sender", "inspect_duration": "1h"},
    ])  # fmt: skip
    rep = _killed_after_a_gap_and_started_again(cfg, dst)
    try:
        wait_for(
            lambda: "refused source sequence 1500" in rep.output(10**9), SLOW_S, "1500 published again", rep
        )
        allow(dst, target, "allow_rollup_hdrs")
        wait_for(lambda: run(count(dst, "T")) == 3_000, SLOW_S, "1500 copied", rep)
        wait_handled(rep, src, "S")
    finally:
        assert rep.stop() == 0, rep.output()
    assert sorted(copied_source_sequences(dst, "T")) == list(range(1, 3_001))  # each once
    assert "copies failed publishes sent (source sequences" in rep.output(10**9)  # the record was read
    assert not (tmp_path / "state" / "S_dc1" / "unacked.json").exists()  # and is gone once replayed
