"""Server and network faults while the replicator copies a stream that is being published to:
each test ends with the target holding exactly one copy of every source message, in order.

These tests stop and start NATS servers, so they run on the `nats-server` binary (harness.
localnats) rather than the shared fixture's containers; the links go through the fault proxy
(harness.faultproxy). Recovery times are printed (run with -s) for docs/faults.md.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
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
    stream_last_sequence,
    wait_for,
    wait_handled,
    write_config,
)
from nats.js.api import StreamConfig

from harness.faultproxy import FaultProxy
from harness.localnats import NatsCluster
from harness.servers import nats_cluster
from harness.streams import copy_differences, read_all
from harness.streams import count_messages as count
from replicator.headers import parse_source_header
from replicator.nats.wire import first_value
from replicator.sampling.rules import SamplingParams

from .test_sampling import (
    SUBJECTS,
    by_sender_field,
    copied,
    expected,
    fleet_file,
    got,
    sampling_stream,
    settle_expected,
)

pytestmark = pytest.mark.integration


class LivePublisher:
    """Publishes registrations to the source at a steady rate on a thread, riding out source
    faults: a publish that fails is retried with the same Nats-Msg-Id, so the source holds
    each message once whatever happened to its ack."""

    def __init__(
        self,
        url: str,
        rate: float = 400.0,
        subject: Callable[[int], str] | None = None,
        body: Callable[[int], bytes] | None = None,
    ) -> None:
        self.url = url
        self.rate = rate
        self.subject = subject or (lambda i: f"reg.{i % 97}")
        self.body = body or (lambda i: registration(i, 800))
        self.sent = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async def quiet(_e: Exception) -> None:  # the faults are deliberate
            return None

        nc = await nats.connect(
            self.url.split(","), max_reconnect_attempts=-1, reconnect_time_wait=0.2, error_cb=quiet
        )
        js = nc.jetstream(timeout=2)
        try:
            while not self._stop.is_set():
                i = self.sent
                while not self._stop.is_set():
                    try:
                        await js.publish(self.subject(i), self.body(i), headers={"Nats-Msg-Id": f"p{i}"})
                        break
                    except Exception:
                        self.errors += 1
                        await asyncio.sleep(0.2)
                self.sent += 1
                await asyncio.sleep(1 / self.rate)
        finally:
            await nc.close()

    def __enter__(self) -> LivePublisher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _port(url: str) -> int:
    return int(url.split(",")[0].rsplit(":", 1)[1])


async def _create_source(url: str, replicas: int = 1) -> None:
    nc = await nats.connect(url.split(","))
    try:
        await nc.jetstream().add_stream(
            StreamConfig(name="REG", subjects=["reg.>"], num_replicas=replicas, allow_direct=True)
        )
    finally:
        await nc.close()


def _recovery(what: str, copies: Callable[[], int], rep: object, timeout: float = SLOW_S) -> float:
    """Seconds from now until the target holds more copies than now."""
    start, before = time.monotonic(), copies()
    wait_for(lambda: copies() > before, timeout, f"copies after {what}", rep)  # type: ignore[arg-type]
    took = time.monotonic() - start
    print(f"\nfault {what}: copying again {took:.1f}s after it ended")
    return took


def _finish_and_check(src: str, dst: str, rep: object) -> None:
    wait_for(lambda: run(count(dst, "REG")) >= run(count(src, "REG")), SLOW_S, "the copy to catch up", rep)  # type: ignore[arg-type]
    assert run(copy_differences(src, "REG", dst, "REG")) == []


@pytest.fixture
def source() -> Iterator[NatsCluster]:
    with nats_cluster(1, "source") as c:
        yield c


@pytest.fixture
def target() -> Iterator[NatsCluster]:
    with nats_cluster(1, "target") as c:
        yield c


@pytest.fixture
def source_trio() -> Iterator[NatsCluster]:
    with nats_cluster(3, "dc1") as c:
        yield c


def test_target_unreachable_for_60s_half_open_restarted_and_slow(
    source: NatsCluster, target: NatsCluster, tmp_path: Path
) -> None:
    run(_create_source(source.url))
    with FaultProxy(_port(target.url)) as link:
        cfg = write_config(tmp_path / "sr.yaml", "dc1", [
            {"stream": "REG", "source_url": source.url, "target_url": link.url},
        ])  # fmt: skip
        rep = start_replicator(cfg)
        try:
            with LivePublisher(source.url):

                def copies() -> int:
                    return int(run(count(target.url, "REG")))

                wait_for(lambda: copies() >= 1000, SLOW_S, "the first copies", rep)
                link.cut()  # the target unreachable for 60 s
                time.sleep(60)
                link.restore()
                _recovery("target unreachable for 60 s", copies, rep)

                link.half_open()  # the link goes silent; nothing tells the replicator
                time.sleep(10)
                link.restore()
                _recovery("half-open target link for 10 s", copies, rep)

                target.servers[0].stop()  # the target server restarted
                time.sleep(3)
                target.servers[0].start()
                _recovery("target server restarted", copies, rep)

                link.latency = 0.02  # a 40 ms round trip, 2 MB/s, from here on
                link.bandwidth = 2_000_000
                time.sleep(5)
            _finish_and_check(source.url, target.url, rep)
        finally:
            assert rep.stop() == 0, rep.output()
    log = rep.output(10**9)
    assert "Traceback" not in log, log


@pytest.fixture
def target_trio() -> Iterator[NatsCluster]:
    with nats_cluster(3, "dc2") as c:
        yield c


def test_an_r3_target_cut_half_open_losing_its_streams_leader_and_slow(
    source_trio: NatsCluster, target_trio: NatsCluster, tmp_path: Path
) -> None:
    """The first test's faults on a clustered target (R3 stream: copies are acknowledged after
    replication, chained by sequence), from an R3 source, each target server behind a proxy of
    its own: every link cut, every link half-open, the server leading the target stream
    restarted, then slow links."""
    source = source_trio
    run(_create_source(source.url, replicas=3))
    run(create_stream(target_trio.url, "REG", ["reg.>"], num_replicas=3))
    links = [FaultProxy(srv.port) for srv in target_trio.servers]
    for link in links:
        link.start()
    try:
        cfg = write_config(tmp_path / "sr.yaml", "dc1", [
            {"stream": "REG", "source_url": source.url, "target_url": ",".join(x.url for x in links)},
        ])  # fmt: skip
        rep = start_replicator(cfg)
        try:
            with LivePublisher(source.url):

                def copies() -> int:
                    return int(run(count(target_trio.url, "REG")))

                wait_for(lambda: copies() >= 1000, SLOW_S, "the first copies", rep)
                for link in links:  # the target cluster unreachable for 20 s
                    link.cut()
                time.sleep(20)
                for link in links:
                    link.restore()
                _recovery("R3 target unreachable for 20 s", copies, rep)

                for link in links:  # every link silent; nothing tells the replicator
                    link.half_open()
                time.sleep(10)
                for link in links:
                    link.restore()
                _recovery("half-open links to an R3 target for 10 s", copies, rep)

                leader = run(_stream_leader(target_trio.url))
                server = next(x for x in target_trio.servers if x.name == leader)
                server.stop()  # the target stream's leader restarted
                time.sleep(3)
                server.start()
                _recovery("the R3 target stream's leader restarted", copies, rep)

                for link in links:  # a 40 ms round trip, 2 MB/s, from here on
                    link.latency, link.bandwidth = 0.02, 2_000_000
                time.sleep(5)
            _finish_and_check(source.url, target_trio.url, rep)
        finally:
            assert rep.stop() == 0, rep.output()
    finally:
        for link in links:
            link.stop()
    log = rep.output(10**9)
    assert "Traceback" not in log, log


def test_source_links_cut_and_the_streams_leader_lost(
    source_trio: NatsCluster, target_trio: NatsCluster, tmp_path: Path
) -> None:
    """A 3-node source cluster (R3 stream) behind a proxy per node, copied to a 3-node target
    cluster (R3): every link cut, then the server leading the stream stopped and started again."""
    target = target_trio
    run(_create_source(source_trio.url, replicas=3))
    links = [FaultProxy(s.port).start() for s in source_trio.servers]
    try:
        url = ",".join(link.url for link in links)
        cfg = write_config(tmp_path / "sr.yaml", "dc1", [
            {"stream": "REG", "source_url": url, "target_url": target.url},
        ])  # fmt: skip
        rep = start_replicator(cfg)
        try:
            with LivePublisher(source_trio.url):

                def copies() -> int:
                    return int(run(count(target.url, "REG")))

                wait_for(lambda: copies() >= 1000, SLOW_S, "the first copies", rep)
                for link in links:
                    link.cut()
                time.sleep(5)
                for link in links:
                    link.restore()
                _recovery("source links cut for 5 s", copies, rep)

                leader = run(_stream_leader(source_trio.url))
                server = next(s for s in source_trio.servers if s.name == leader)
                server.stop()  # the cluster loses the stream's leader
                _recovery(f"source stream leader {leader} stopped", copies, rep)
                server.start()  # and the server comes back (a source server restarted)
                time.sleep(3)
            _finish_and_check(source_trio.url, target.url, rep)
        finally:
            assert rep.stop() == 0, rep.output()
    finally:
        for link in links:
            link.stop()
    assert "Traceback" not in rep.output(10**9)


async def _stream_leader(url: str, stream: str = "REG") -> str:
    nc = await nats.connect(url.split(","))
    try:
        info = await nc.jetstream().stream_info(stream)
        assert info.cluster is not None and info.cluster.leader
        return info.cluster.leader
    finally:
        await nc.close()


@pytest.mark.parametrize("size", [1, 3], ids=["single", "r3"])
def test_a_sampled_stream_through_cuts_a_half_open_link_and_restarts_copies_and_advises_once(
    size: int, tmp_path: Path
) -> None:
    """Sampling and advisories across faults on both sides while a fleet publishes: every copy
    and every advisory exactly as the rules give them, none lost, none twice. On single
    servers, and on 3-server clusters with R3 streams, each server behind a proxy of its own
    and the server leading each stream restarted."""
    with nats_cluster(size, "source") as source, nats_cluster(size, "target") as target:
        src, dst = source.url, target.url
        run(create_stream(src, "REG", SUBJECTS, num_replicas=size))
        run(create_stream(src, "ADV", ["choria.adv.>"], num_replicas=size))
        scenario = fleet_file(
            tmp_path / "fleet.yaml",
            "4h",  # 24 s of publishing at 600x
            [
                {"type": "down", "at": "40m", "duration": "40m", "count": 10},  # timeout, recover
                {"type": "down", "at": "60m", "duration": "100m", "count": 6},  # timeout, expire, new
                {"type": "metadata", "at": "90m", "bytes": 600, "count": 10},  # size trigger
            ],
        )
        src_links = [FaultProxy(x.port).start() for x in source.servers]
        dst_links = [FaultProxy(x.port).start() for x in target.servers]
        try:
            urls = (",".join(x.url for x in src_links), ",".join(x.url for x in dst_links))
            cfg = write_config(tmp_path / "sr.yaml", "dc1", [sampling_stream(*urls)])
            rep = start_replicator(cfg)
            try:
                rep.wait_ready(SLOW_S)
                fleet = subprocess.Popen(
                    [sys.executable, "-m", "emulator.cli", "run", "--scenario", str(scenario), "--url", src],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                )  # fmt: skip
                time.sleep(3)
                for link in dst_links:  # the target unreachable
                    link.cut()
                time.sleep(4)
                for link in dst_links:
                    link.restore()
                time.sleep(2)
                for link in src_links:  # the source links go silent
                    link.half_open()
                time.sleep(4)
                for link in src_links:
                    link.restore()
                time.sleep(2)
                _restart_leader(target, "REG", 2)  # the target stream's server restarted
                time.sleep(2)
                _restart_leader(source, "REG", 2)  # the source's (the fleet rides it out)
                assert fleet.wait(180) == 0, fleet.stderr.read() if fleet.stderr else ""
                want_copied, want_advs = settle_expected(src, dst, rep)
            finally:
                assert rep.stop() == 0, rep.output()
        finally:
            for link in src_links + dst_links:
                link.stop()
        copied_seqs, advs, docs = got(src, dst, "REG", "ADV", "dc1")
    assert copied_seqs == want_copied
    assert advs == want_advs
    events = Counter(e for _, e, _ in advs)
    assert events["recover"] >= 10 and events["expire"] >= 6
    assert len({d["event_id"] for d in docs}) == len(docs)


def _restart_leader(cluster: NatsCluster, stream: str, down_s: float) -> None:
    """The server leading `stream` (the only one of a single server) stopped, started again."""
    server = cluster.servers[0]
    if len(cluster.servers) > 1:
        leader = run(_stream_leader(cluster.url, stream))
        server = next(x for x in cluster.servers if x.name == leader)
    server.stop()
    time.sleep(down_s)
    server.start()


def test_a_backlog_read_while_the_source_streams_leader_is_killed_and_back_10s_later_is_whole(
    source_trio: NatsCluster, target_trio: NatsCluster, tmp_path: Path
) -> None:
    """40,000 messages in an R3 source stream copied to an R3 target, read through 3 MB/s links
    to the source servers;
    the server leading the stream is killed (SIGKILL) mid-copy and started again 10 s later.
    Every range is read to its end or read again, never committed short (issue 28, hole 7:
    before the fix, twice out of two runs, whole 1,000-message sub-ranges were missing and the
    lag said 0)."""
    target = target_trio
    run(_create_source(source_trio.url, replicas=3))
    run(publish(source_trio.url, [(f"reg.{i % 97}", registration(i, 1000), None) for i in range(40_000)]))
    links = [FaultProxy(s.port).start() for s in source_trio.servers]
    for link in links:
        link.bandwidth = 3_000_000
    try:
        cfg = write_config(tmp_path / "sr.yaml", "dc1", [
            {"stream": "REG", "source_url": ",".join(link.url for link in links), "target_url": target.url},
        ])  # fmt: skip
        rep = start_replicator(cfg)
        try:
            wait_for(lambda: run(count(target.url, "REG")) >= 4000, SLOW_S, "the first copies", rep)
            leader = run(_stream_leader(source_trio.url))
            server = next(s for s in source_trio.servers if s.name == leader)
            server.kill9()
            time.sleep(10)
            server.start()
            for link in links:
                link.bandwidth = 0  # the rest at full speed
            wait_for(lambda: run(count(target.url, "REG")) >= 40_000, SLOW_S, "the whole copy", rep)
            time.sleep(2)
            assert run(copy_differences(source_trio.url, "REG", target.url, "REG")) == []
        finally:
            assert rep.stop() == 0, rep.output()
    finally:
        for link in links:
            link.stop()


def test_sparse_sampled_copies_read_while_the_source_streams_leader_is_killed_are_each_copied_once(
    source_trio: NatsCluster, target_trio: NatsCluster, tmp_path: Path
) -> None:
    """A sampled fleet whose copies lie far apart (one message in twelve forced, 100 senders
    seen once an hour), so each batch's copies are read back one by one by direct gets of their
    own (replicator.copy_reads), from an R3 source while it is published to; the server leading
    the stream is killed (SIGKILL) mid-copy and started again 10 s later, then catches up while
    it answers direct gets. Every copy the rules give is in the target once, in order. (Where
    the kill lands varies: in one run it failed a batch with a request timeout, and the batch
    was read again; the replica-behind and no-server-serving answers are each tested
    deterministically in tests/integration/nats/test_readers.py.)"""
    src, dst = source_trio.url, target_trio.url
    run(create_stream(src, "REG", SUBJECTS, num_replicas=3))
    run(create_stream(dst, "REG", SUBJECTS, num_replicas=3))

    def body(i: int) -> bytes:
        doc = json.loads(registration(i, 1000))
        doc["force"] = i % 12 == 0
        return json.dumps(doc).encode()

    def subject(i: int) -> str:
        return f"{SUBJECTS[0][:-1]}n{i % 100}"

    run(publish(src, [(subject(i), body(i), None) for i in range(6000)]))  # a backlog, then live
    entry = sampling_stream(src, dst, inspect_duration="1h", warn_duration="30m")
    del entry["advisory"]  # the copies are what this test is about
    rep = start_replicator(write_config(tmp_path / "sr.yaml", "dc1", [entry]))
    try:
        with LivePublisher(src, rate=300, subject=lambda i: subject(6000 + i), body=lambda i: body(6000 + i)):
            wait_for(lambda: run(count(dst, "REG")) >= 591, SLOW_S, "the backlog's copies", rep)
            time.sleep(3)  # live batches, each with a few copies
            leader = run(_stream_leader(src))
            server = next(s for s in source_trio.servers if s.name == leader)
            server.kill9()
            time.sleep(10)
            server.start()
            time.sleep(8)  # the restarted server catches up while it answers direct gets
        wait_handled(rep, src, "REG")  # every message's copies are out
    finally:
        assert rep.stop() == 0, rep.output()
    hour = SamplingParams(inspect_ms=3_600_000, warn_ms=1_800_000, size_trigger=300, stream="REG")
    want, _ = expected(src, "REG", by_sender_field, hour)
    # The backlog's 591 (100 senders' first, one in twelve forced, 9 of them both), and live ones.
    assert len([seq for seq in want if seq <= 6000]) == 591
    assert len([seq for seq in want if seq > 6000]) >= 100
    assert copied(dst, "REG", "dc1") == want


SAMPLED = {"inspect_field": "sender", "inspect_duration": "1h"}  # every sender new: every message copied


@pytest.mark.parametrize("size", [1, 3], ids=["single", "r3"])
@pytest.mark.parametrize("entry", [{}, SAMPLED], ids=["copy", "sampled"])
def test_unchained_copies_stored_with_their_acks_lost_past_the_duplicate_window_are_not_stored_again(
    entry: dict[str, str], size: int, source: NatsCluster, tmp_path: Path
) -> None:
    """`chain_copies: false`, a target with a 1 s duplicate window: the target stores a batch's
    copies but their acks never come back (every target link drops replies), and the batch
    fails long after the window. Its copies must not go again: Nats-Msg-Id no longer drops
    them there, so a copy entry cuts what it left in flight to what the target lacks, and a
    sampled entry's replay (it has no in-flight record) leaves out what the target holds
    (CI's chaos run, seed 293: a target server killed mid-batch, 25 copies stored twice,
    30 s later)."""
    run(_create_source(source.url))
    with nats_cluster(size, "dc2") as target:
        run(create_stream(target.url, "REG", ["reg.>"], num_replicas=size, duplicate_window=1.0))
        links = [FaultProxy(s.port).start() for s in target.servers]
        try:
            cfg = write_config(tmp_path / "sr.yaml", "dc1", [
                {"stream": "REG", "source_url": source.url, "target_url": ",".join(x.url for x in links),
                 "chain_copies": False, **entry},
            ])  # fmt: skip
            rep = start_replicator(cfg)
            try:

                def send(first: int, n: int) -> None:
                    run(publish(source.url, [(f"reg.{i}", json.dumps({"sender": f"n{i}"}).encode(), None) for i in range(first, first + n)]))  # fmt: skip

                send(0, 300)
                wait_handled(rep, source.url, "REG")
                # The copies of 1-300 went ahead of the query, while Spark started: the links go
                # deaf only once it replicates. Else, on a slow machine, its start came after the
                # client had given up on its unanswered pings (about 15 s), and nothing reached
                # the target to be stored (CI, 2026-12-05).
                rep.wait_ready(SLOW_S)
                for link in links:
                    link.drop_replies()
                send(300, 300)
                # Stored, unacknowledged: the replicator cannot tell. (The first of them may be
                # a batch of its own, whose failure stops the rest.)
                wait_for(lambda: run(count(target.url, "REG")) > 300, SLOW_S, "copies stored with their acks lost", rep)  # fmt: skip
                time.sleep(3)  # past the target's duplicate window
                for link in links:
                    link.restore()
                send(600, 10)  # copied only once the failed batch is settled
                wait_handled(rep, source.url, "REG")
                assert run(copy_differences(source.url, "REG", target.url, "REG")) == []
            finally:
                assert rep.stop() == 0, rep.output()
        finally:
            for link in links:
                link.stop()
    assert "Traceback" not in rep.output(10**9)


def test_a_sampled_replay_does_not_store_again_a_copy_the_target_pushed_out(
    source: NatsCluster, target: NatsCluster, tmp_path: Path
) -> None:
    """A target keeping one message a subject: a publish that failed stored a sender's copy
    and then its next one (a size change), which pushed the first out. Its replay, past the
    target's duplicate window, must not store the first again after the second: the
    subject's value would go back to the older one."""
    run(create_stream(source.url, "REG", ["reg.>"]))
    run(create_stream(target.url, "REG", ["reg.>"], duplicate_window=1.0, max_msgs_per_subject=1))
    with FaultProxy(_port(target.url)) as link:
        cfg = write_config(tmp_path / "sr.yaml", "dc1", [
            {"stream": "REG", "source_url": source.url, "target_url": link.url, "chain_copies": False,
             "inspect_field": "sender", "inspect_duration": "1h", "size_trigger": 100},
        ])  # fmt: skip
        rep = start_replicator(cfg)
        try:

            def doc(i: int, pad: int) -> bytes:
                return json.dumps({"sender": f"n{i}", "pad": "x" * pad}).encode()

            run(publish(source.url, [(f"reg.{i}", doc(i, 0), None) for i in range(50)]))
            wait_handled(rep, source.url, "REG")
            before = run(stream_last_sequence(target.url, "REG"))  # its count stays at 50
            link.drop_replies()
            # The first goes alone (the helper waits for its ack) and is no copy (same sender,
            # same size); the pairs after it come as one batch: each sender's copy, then its next.
            pairs = [(f"reg.{i}", doc(i, pad), None) for i in range(50) for pad in (500, 1000)]
            run(publish(source.url, [("reg.0", doc(0, 0), None), *pairs]))
            wait_for(lambda: run(stream_last_sequence(target.url, "REG")) > before, SLOW_S, "copies stored with their acks lost", rep)  # fmt: skip
            time.sleep(3)  # past the target's duplicate window
            link.restore()
            wait_handled(rep, source.url, "REG")
            last_on = {m.subject: m.seq for m in run(read_all(source.url, "REG"))}
            held = {}
            for m in run(read_all(target.url, "REG")):
                mark = parse_source_header(first_value(m.headers, "Choria-SR-Source"))
                assert mark is not None
                assert m.subject not in held, f"{m.subject} twice in a target keeping one a subject"
                held[m.subject] = mark.sequence
            assert held == last_on  # every subject's newest source message, none older
        finally:
            assert rep.stop() == 0, rep.output()
    assert "Traceback" not in rep.output(10**9)
