"""The doorbell a caught-up copy's planner waits on (replicator.nats.doorbell), on a real server:
it rings on the first message after it is armed and carries no more than that one."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from helpers import run
from nats_servers import NatsCluster

from replicator.nats.connect import open_connection
from replicator.nats.doorbell import Doorbell


def test_it_rings_once_on_the_first_message_and_carries_no_more(nats_server: NatsCluster) -> None:
    async def go() -> None:
        nc = await open_connection(nats_server.url)
        publisher = await open_connection(nats_server.url)
        bell = Doorbell(["reg.>", "other.*"])
        try:
            assert await bell.arm(nc)  # armed just now: the caller looks at the stream first
            assert not await bell.arm(nc)  # still armed: nothing to do
            assert not bell.rang.is_set()
            await publisher.publish("unrelated", b"x")
            await publisher.flush()
            await asyncio.sleep(0.2)
            assert not bell.rang.is_set()
            for i in range(200):
                await publisher.publish(f"reg.n{i}", b"x" * 1024)
            await publisher.flush()
            assert await asyncio.to_thread(bell.wait, 30)
            await asyncio.sleep(0.3)
            # The server dropped the interest after one message on each subject: none of the
            # 200 reached this connection beyond the first.
            assert nc.stats["in_msgs"] <= 1, nc.stats
            assert await bell.arm(nc)  # rung: armed again for the next quiet spell
            assert not bell.rang.is_set()
            await publisher.publish("other.x", b"y")
            await publisher.flush()
            assert await asyncio.to_thread(bell.wait, 30), (nc.stats, nc.last_error)
            await bell.disarm()
        finally:
            await publisher.close()
            await nc.close()

    run(go())


def test_a_subject_that_is_not_utf8_rings_it_and_the_connection_goes_on_hearing(
    nats_server: NatsCluster,
) -> None:
    """nats-py decodes a subscription's subjects strictly: such a subject ended its read loop,
    and the connection heard nothing (no replies, no ring) until its pings ran out. Disarmed,
    the bell leaves no handler behind (one a quiet spell would add up over days)."""

    async def go() -> None:
        nc = await open_connection(nats_server.url)
        publisher = await open_connection(nats_server.url)
        bell = Doorbell(["reg.>"])
        handlers_before = len(nc._raw_handlers)
        try:
            assert await bell.arm(nc)
            await publisher._send_command(b"PUB reg.caf\xe9 1\r\nx\r\n")
            await publisher.flush()
            assert await asyncio.to_thread(bell.wait, 30), (nc.stats, nc.last_error)
            await nc.flush(timeout=5)  # its reader still reads: the PONG comes
            await bell.disarm()
            assert len(nc._raw_handlers) == handlers_before
        finally:
            await publisher.close()
            await nc.close()

    run(go())


def test_a_ring_that_came_while_the_live_copies_asked_the_stream_ends_their_next_pause(
    nats_server: NatsCluster,
) -> None:
    """The live copies (replicator.live_copies) ask the stream again after 2, 4, 8... ms after a
    ring, and a ring during a pause ends it. One that came while they were asking the stream
    (the bell then rung, not armed) was slept through until the pause ended (up to 64 ms);
    now the next pause ends at once, and only that one."""
    from typing import cast

    from replicator.live_copies import LiveCopier

    async def go() -> None:
        nc = await open_connection(nats_server.url)
        publisher = await open_connection(nats_server.url)
        bell = Doorbell(["reg.>"])
        copier = LiveCopier(cast(Any, None))  # its pauses use the bell and the stop flag only
        copier._bell = bell
        try:
            assert await bell.arm(nc)
            await publisher.publish("reg.n1", b"x")
            await publisher.flush()
            assert await asyncio.to_thread(bell.wait, 30)  # it rang while the copier was asking
            assert await asyncio.to_thread(copier._pause, 5.0)  # so the pause ends at once
            assert not await asyncio.to_thread(copier._pause, 0.01)  # heeded: a pause again
            assert await bell.arm(nc)

            async def publish_soon() -> None:
                await asyncio.sleep(0.05)
                await publisher.publish("reg.n2", b"y")
                await publisher.flush()

            soon = asyncio.create_task(publish_soon())
            assert await asyncio.to_thread(copier._pause, 30.0)  # armed: a ring ends the pause
            await soon
        finally:
            await bell.disarm()
            await publisher.close()
            await nc.close()

    run(go())


def test_a_caught_up_plan_waits_for_the_next_message_instead_of_finding_nothing(
    target_of_each_kind: tuple[NatsCluster, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner's side (NatsJetStreamReader.latestOffset): with nothing new it waits on the
    doorbell, and a message stored meanwhile is in the plan it returns, not in the next, round
    after round. The ring can come before the stream counts the message (a clustered stream
    counts it once its replicas agreed): found by CI, and 1-9 rounds in 100 on an R3 stream."""
    import threading

    from helpers import create_stream, publish

    from replicator.options import ReaderOptions
    from replicator.spark import datasource
    from replicator.spark.datasource import NatsJetStreamReader

    # A long wait, so a slow publish on a busy machine still lands within it: a ring ends the
    # wait at once, and without one the plan would come back empty after it.
    monkeypatch.setattr(datasource, "NEWS_WAIT_S", 10.0)
    # And a long settle after a ring, so a replication step stalled on a busy machine does not
    # fail the test; the plan ends the moment the stream counts the message.
    monkeypatch.setattr(datasource, "RING_SETTLE_S", 5.0)
    cluster, replicas = target_of_each_kind
    url = cluster.url
    run(create_stream(url, "LIVE", ["live.>"], num_replicas=replicas))
    run(publish(url, [("live.a", b"1", None)]))
    reader = NatsJetStreamReader(ReaderOptions(url=url, stream="LIVE"))
    try:
        limit = reader.getDefaultReadLimit()
        caught_up = reader.latestOffset(reader.initialOffset(), limit)
        assert int(caught_up["seq"]) == 2  # the one message
        missed = []
        for round_ in range(60):
            assert reader.latestOffset(caught_up, limit) == caught_up  # armed now
            seq = int(caught_up["seq"])
            later = threading.Timer(0.01, lambda: run(publish(url, [("live.b", b"2" * 1024, None)])))
            later.start()
            try:
                got = reader.latestOffset(caught_up, limit)
            finally:
                later.join()
            if got == caught_up:
                missed.append(round_)
                got = reader.latestOffset(caught_up, limit)  # it is in the next plan
            assert int(got["seq"]) == seq + 1 and int(got["from"]) == seq, (got, missed)
            caught_up = got
        assert missed == [], f"rounds whose plan came back without the message that rang: {missed}"
    finally:
        reader.stop()


def test_a_sampled_plan_waits_for_news_but_never_past_its_clocks_next_move(
    nats_server: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sampled entry's plans move its event-time clock every clock_interval_ms even with
    nothing new (timeouts are advised by that clock): its wait for the bell ends when the clock
    is due, and a message published meanwhile is in the plan that waited."""
    import threading

    from helpers import create_stream, publish

    from replicator.options import ReaderOptions, SamplingOptions
    from replicator.spark import datasource
    from replicator.spark.datasource import NatsJetStreamReader

    # Waits for the bell far longer than the clock's interval: only the clock can end them early.
    monkeypatch.setattr(datasource, "NEWS_WAIT_S", 30.0)
    interval_ms = 1500
    url = nats_server.url
    run(create_stream(url, "SAMPLED", ["sampled.>"]))
    run(publish(url, [("sampled.a", b'{"sender": "a"}', None)]))
    sampling = SamplingOptions(inspect_field="sender", clock_interval_ms=interval_ms)
    reader = NatsJetStreamReader(ReaderOptions(url=url, stream="SAMPLED", sampling=sampling))
    try:
        limit = reader.getDefaultReadLimit()
        offset = reader.latestOffset(reader.initialOffset(), limit)
        assert int(offset["seq"]) == 2 and offset["clock"] > 0, offset
        # Nothing new: the plans wait for the bell, but the clock moves within its interval
        # (and a busy machine's slack), never after the 30 s wait.
        began = time.monotonic()
        moved = offset
        while moved == offset and time.monotonic() - began < 20:
            moved = reader.latestOffset(offset, limit)
        took = time.monotonic() - began
        assert moved != offset and int(moved["seq"]) == 2 and moved["clock"] > offset["clock"], moved
        assert took < 10, f"the clock moved {took:.1f} s after the last batch; its interval is 1.5 s"
        assert reader._bell is not None, "a sampled entry waited on no doorbell"
    finally:
        reader.stop()

    # A clock that moves once a minute: plans wait on the bell (30 s here), and a message
    # published meanwhile ends the wait (a ring can come before the stream counts the message:
    # the plans after it look again).
    sampling = SamplingOptions(inspect_field="sender", clock_interval_ms=60_000)
    reader = NatsJetStreamReader(ReaderOptions(url=url, stream="SAMPLED", sampling=sampling))
    try:
        offset = reader.latestOffset(reader.initialOffset(), limit)
        assert int(offset["seq"]) == 2, offset
        assert reader.latestOffset(offset, limit) == offset and reader._bell.armed  # armed now
        began = time.monotonic()
        later = threading.Timer(0.2, lambda: run(publish(url, [("sampled.b", b'{"sender": "b"}', None)])))
        later.start()
        try:
            news = offset
            while int(news["seq"]) == 2 and time.monotonic() - began < 25:
                news = reader.latestOffset(offset, limit)
        finally:
            later.join()
        took = time.monotonic() - began
        assert int(news["seq"]) == 3, news
        assert took < 10, f"the message was planned {took:.1f} s after it was published"
    finally:
        reader.stop()


def test_a_sampled_plan_moves_its_clock_when_the_sink_says_a_sender_is_due_and_at_least_every_max_idle(
    nats_server: NatsCluster, tmp_path: Any
) -> None:
    """With the sink's file for the batch that set the clock (replicator.spark.clock_due), the
    planner keeps the clock until the due time, and moves it at least every clock_max_idle_ms
    when nothing is due; a file written after another batch is not trusted."""
    from helpers import create_stream, publish

    from replicator.options import ReaderOptions, SamplingOptions
    from replicator.spark.clock_due import ClockDue, write_clock_due
    from replicator.spark.datasource import NatsJetStreamReader

    url, due_file = nats_server.url, str(tmp_path / "clock-due.json")
    run(create_stream(url, "DUE", ["due.>"]))
    run(publish(url, [("due.a", b'{"sender": "a"}', None)]))

    def plans_until_the_clock_moves(max_idle_ms: int, due: Any) -> tuple[int, float]:
        """How far the clock moved (ms of event time) and after how long (s)."""
        sampling = SamplingOptions(
            inspect_field="sender", clock_due_file=due_file, clock_max_idle_ms=max_idle_ms
        )
        reader = NatsJetStreamReader(ReaderOptions(url=url, stream="DUE", sampling=sampling))
        try:
            limit = reader.getDefaultReadLimit()
            offset = reader.latestOffset(reader.initialOffset(), limit)
            write_clock_due(due_file, due(offset["clock"]))
            began, moved = time.monotonic(), offset
            while moved == offset and time.monotonic() - began < 30:
                moved = reader.latestOffset(offset, limit)
            assert int(moved["seq"]) == 2 and moved["clock"] > offset["clock"], moved
            return int(moved["clock"]) - int(offset["clock"]), time.monotonic() - began
        finally:
            reader.stop()

    # Nothing ever due: the clock moves after clock_max_idle_ms (4 s), not every second. How
    # far it moved is event time (the server's clock), so a pause of this test's process
    # between two plans does not make it look early.
    moved_ms, took = plans_until_the_clock_moves(4000, lambda clock: ClockDue(clock, None))
    assert moved_ms >= 4000 and took < 20, (
        f"the clock moved by {moved_ms} ms after {took:.1f} s; clock_max_idle_ms is 4 s"
    )
    # A sender due 3 s after the batch's clock: moved then, long before a minute.
    moved_ms, took = plans_until_the_clock_moves(60_000, lambda clock: ClockDue(clock, clock + 3000))
    assert moved_ms >= 3000 and took < 20, (
        f"the clock moved by {moved_ms} ms after {took:.1f} s; a sender was due after 3 s"
    )
    # Written after another batch: ignored, so the clock moves every clock_interval_ms (1 s).
    _, took = plans_until_the_clock_moves(60_000, lambda clock: ClockDue(clock - 1, None))
    assert took < 20, f"the clock moved after {took:.1f} s; its interval is 1 s"


def test_a_bell_armed_before_the_planners_connection_was_lost_is_armed_anew(
    nats_server: NatsCluster,
) -> None:
    """nats-py subscribes again after a reconnect, so an armed bell would stay armed with
    nothing counting whether it hears: once the connection was lost, the next quiet plan arms
    a new one (and looks at the stream again, for what was published while it was away)."""
    from helpers import create_stream

    from harness.faultproxy import FaultProxy
    from replicator.options import ReaderOptions
    from replicator.spark.datasource import NatsJetStreamReader

    run(create_stream(nats_server.url, "AWAY", ["away.>"]))
    port = int(nats_server.url.split(",")[0].rsplit(":", 1)[1])
    with FaultProxy(port) as link:
        reader = NatsJetStreamReader(ReaderOptions(url=link.url, stream="AWAY"))
        try:
            offset = reader.initialOffset()
            limit = reader.getDefaultReadLimit()
            assert reader.latestOffset(offset, limit) == offset
            first = reader._bell
            assert first is not None and first.armed
            link.cut()
            time.sleep(0.5)
            link.restore()
            deadline = time.monotonic() + 30
            while reader._nc.disconnects == 0 or not reader._nc.is_connected:
                assert time.monotonic() < deadline, "the planner's connection did not come back"
                time.sleep(0.1)
            assert reader.latestOffset(offset, limit) == offset
            assert reader._bell is not first and reader._bell.armed
            assert reader._bell.disconnects_at_arm == reader._nc.disconnects
        finally:
            reader.stop()


def test_a_doorbell_that_hears_nothing_of_a_growing_stream_is_given_up(
    nats_server: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with an account that may not subscribe to the stream's subjects: plans go back to
    asking the stream, rather than waiting on a bell that never rings."""
    from helpers import create_stream, publish

    from replicator.nats import doorbell
    from replicator.options import ReaderOptions
    from replicator.spark.datasource import DEAF_AFTER_PLANS, DEAF_AFTER_S, NatsJetStreamReader

    class Deaf(doorbell.Doorbell):
        """Hears what an account that may not subscribe to the stream's subjects hears."""

        async def arm(self, nc: object, timeout: float = 5.0) -> bool:
            heard, self.subjects = self.subjects, ["deaf.never"]
            try:
                return await super().arm(nc, timeout)
            finally:
                self.subjects = heard

    monkeypatch.setattr(doorbell, "Doorbell", Deaf)
    url = nats_server.url
    run(create_stream(url, "DEAF", ["deaf.>"]))
    reader = NatsJetStreamReader(ReaderOptions(url=url, stream="DEAF"))
    try:
        offset = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        assert reader.latestOffset(offset, limit) == offset  # nothing yet: armed
        time.sleep(DEAF_AFTER_S)
        for i in range(DEAF_AFTER_PLANS):
            assert reader._bell is not None, f"given up after {i} plans"
            run(publish(url, [(f"deaf.{i}", b"x", None)]))
            offset = reader.latestOffset(offset, limit)  # news it did not ring for
            # A sparse stream: quiet plans between the news count neither way.
            assert reader.latestOffset(offset, limit) == offset
        assert reader._bell is None and reader._bell_given_up
    finally:
        reader.stop()


def test_plans_that_copy_nothing_never_give_the_doorbell_up(nats_server: NatsCluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A stopping query's plans (the stop file) are not news the bell missed: a clean stop
    after a quiet spell warns of nothing."""
    from helpers import create_stream

    from replicator.options import ReaderOptions
    from replicator.spark.datasource import DEAF_AFTER_PLANS, DEAF_AFTER_S, NatsJetStreamReader

    url = nats_server.url
    run(create_stream(url, "QUIET", ["quiet.>"]))
    stop = tmp_path / "stopping"
    reader = NatsJetStreamReader(ReaderOptions(url=url, stream="QUIET", stop_file=str(stop)))
    try:
        offset = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        assert reader.latestOffset(offset, limit) == offset  # armed
        time.sleep(DEAF_AFTER_S)
        stop.touch()
        for _ in range(DEAF_AFTER_PLANS + 1):
            assert reader.latestOffset(offset, limit) == offset
        assert reader._bell is not None and not reader._bell_given_up
    finally:
        reader.stop()


def test_a_stream_fed_from_other_streams_gets_no_doorbell_and_a_changed_stream_a_new_one(
    nats_server: NatsCluster,
) -> None:
    """Messages a sourcing stream takes from others arrive on none of its subjects: its plans
    keep asking. A stream whose subjects change gets a doorbell on the new ones."""
    from helpers import create_stream
    from nats.js.api import StreamConfig, StreamSource

    from replicator.options import ReaderOptions
    from replicator.spark.datasource import NatsJetStreamReader

    url = nats_server.url
    run(create_stream(url, "ORIGIN", ["origin.>"]))

    async def make_fed() -> None:
        nc = await open_connection(url)
        try:
            await nc.jetstream().add_stream(
                StreamConfig(name="FED", subjects=["fed.>"], sources=[StreamSource(name="ORIGIN")])
            )
        finally:
            await nc.close()

    run(make_fed())
    fed = NatsJetStreamReader(ReaderOptions(url=url, stream="FED"))
    try:
        offset = fed.initialOffset()
        assert fed.latestOffset(offset, fed.getDefaultReadLimit()) == offset
        assert fed._bell is None
    finally:
        fed.stop()

    run(create_stream(url, "GROWS", ["grows.a"]))
    reader = NatsJetStreamReader(ReaderOptions(url=url, stream="GROWS"))
    try:
        offset = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        assert reader.latestOffset(offset, limit) == offset
        assert reader._bell is not None and reader._bell.subjects == ["grows.a"]

        async def add_subject() -> None:
            nc = await open_connection(url)
            try:
                await nc.jetstream().update_stream(
                    StreamConfig(name="GROWS", subjects=["grows.a", "grows.b"])
                )
            finally:
                await nc.close()

        run(add_subject())
        assert reader.latestOffset(offset, limit) == offset
        assert reader._bell.subjects == ["grows.a", "grows.b"]
    finally:
        reader.stop()


def test_a_user_that_may_not_subscribe_to_the_streams_subjects_polls_after_one_warning() -> None:
    """The server refuses the doorbell's subscription (permissions): one warning naming the fix,
    and plans ask the stream again instead of waiting on a bell that never rings."""
    import logging

    from helpers import create_stream
    from nats_servers import nats_cluster

    from replicator.options import ReaderOptions
    from replicator.spark import datasource
    from replicator.spark.datasource import NatsJetStreamReader

    class Kept(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    # On the modules' own loggers (the planner's, and its connection's error callback): whatever
    # another test in this process did to logging.
    from replicator.nats import connect

    kept = Kept()
    loggers = [datasource.log, connect.log]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(kept)
        logger.disabled = False
        logger.setLevel(logging.WARNING)
    users = (
        'authorization { users: [{user: repl, password: pw, permissions: {subscribe: {deny: ["deny.>"]}}}] }'
    )
    try:
        with nats_cluster(1, "perms", users, connect={"user": "repl", "password": "pw"}) as server:
            url = server.url.replace("nats://", "nats://repl:pw@")
            run(create_stream(url, "DENIED", ["deny.>"]))
            reader = NatsJetStreamReader(ReaderOptions(url=url, stream="DENIED"))
            try:
                offset = reader.initialOffset()
                limit = reader.getDefaultReadLimit()
                for _ in range(3):
                    assert reader.latestOffset(offset, limit) == offset
                state = (reader._bell, reader._bell_given_up, reader._nc.last_error if reader._nc else None)
                assert reader._bell is None and reader._bell_given_up, (state, kept.lines)
            finally:
                reader.stop()
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(kept)
            logger.setLevel(level)
    # One warning in all, and it names the fix.
    assert len(kept.lines) == 1 and "deny.>" in kept.lines[0], kept.lines
    assert "refused a subscription" in kept.lines[0] and "allow this user to subscribe" in kept.lines[0]
