"""How the emulator accounts for a batch whose publish failed part-way (no server: the
publisher's contract played out, as replicator.nats.publisher keeps it)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from emulator import publisher as emulator_publisher
from emulator.publisher import FleetPublisher
from emulator.scenario import parse_scenario
from emulator.schedule import Schedule
from replicator.nats.publisher import PublishError, PublishOutcome


class LosesTheConnectionOnce:
    """Stores (and acks) the first `first` messages of its first call, then raises as a lost
    connection does; later calls store everything, a message already stored acked as a
    duplicate with its first sequence (as the stream's Nats-Msg-Id window does)."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.calls: list[list[bytes]] = []
        self.stored: dict[bytes, int] = {}

    async def publish(
        self, messages: Iterable[tuple[str, bytes, bytes]], timeout: float, seqs: dict[int, int]
    ) -> PublishOutcome:
        batch = list(messages)
        self.calls.append([msg_id for _, _, msg_id in batch])
        for index, (_, _, msg_id) in enumerate(batch):
            if len(self.calls) == 1 and index == self.first:
                raise PublishError("the connection to the target was lost")
            seqs[index] = self.stored.setdefault(msg_id, len(self.stored) + 1)
        return PublishOutcome(published=len(batch), stored=len(batch))


def fleet_publisher(**kw: Any) -> FleetPublisher:
    s = parse_scenario({"name": "t", "seed": 1, "duration": "5m", "fleet": {"nodes": 10}})
    return FleetPublisher(Schedule(s), "nats://127.0.0.1:1", **kw)


def messages(n: int) -> list[tuple[str, bytes, bytes]]:
    return [(f"reg.n{i}", b"{}", b"Nats-Msg-Id: n%d:0\r\n" % i) for i in range(n)]


def test_what_was_acked_before_a_lost_connection_counts_as_stored_and_only_the_rest_goes_again(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(emulator_publisher, "RETRY_WAIT_S", 0)
    pub, target = fleet_publisher(), LosesTheConnectionOnce(first=3)
    seqs = asyncio.run(pub._publish_acked(target, messages(5)))  # type: ignore[arg-type]
    assert seqs == [1, 2, 3, 4, 5]  # each message's own sequence, none lost to the failed try
    assert target.calls[1] == [b"Nats-Msg-Id: n3:0\r\n", b"Nats-Msg-Id: n4:0\r\n"]
    assert pub.stats.republished == 2


def test_a_stop_during_a_lost_connection_still_stores_what_was_sent(monkeypatch: Any) -> None:
    # The chaos campaign stops its fleet with SIGTERM right after a fault: what was in flight
    # must not count as failed (the run would report a failed emulator with nothing lost).
    monkeypatch.setattr(emulator_publisher, "RETRY_WAIT_S", 0)
    pub, target = fleet_publisher(), LosesTheConnectionOnce(first=3)
    pub.stop()
    seqs = asyncio.run(pub._publish_acked(target, messages(5)))  # type: ignore[arg-type]
    assert seqs == [1, 2, 3, 4, 5]
    assert pub.stats.republished == 2


def test_a_second_stop_gives_up_what_was_not_stored_and_keeps_what_was(monkeypatch: Any) -> None:
    pub, target = fleet_publisher(), LosesTheConnectionOnce(first=3)
    pub.stop()
    pub.stop()
    seqs = asyncio.run(pub._publish_acked(target, messages(5)))  # type: ignore[arg-type]
    assert seqs == [1, 2, 3, 0, 0]  # three stored (and logged), two never were


def test_a_stop_mid_tick_sends_no_later_slice(monkeypatch: Any) -> None:
    """A stop while a tick's first slice is out: the tick's later slices are not sent (each
    would have its own retries to wait out while the fleet is stopping)."""
    monkeypatch.setattr(emulator_publisher, "MAX_BATCH", 2)  # a tick of 50 publishes: 25 slices
    s = parse_scenario({"name": "t", "seed": 1, "duration": "5m", "speedup": 1e6, "fleet": {"nodes": 50}})
    pub = FleetPublisher(Schedule(s), "nats://127.0.0.1:1")
    sent: list[tuple[int, int]] = []

    async def publish_slice(nc: Any, publisher: Any, p: Any, requests: Any, i: int, j: int) -> None:
        sent.append((i, j))
        pub.stop()  # SIGTERM while the first slice is in flight

    monkeypatch.setattr(pub, "_publish_slice", publish_slice)
    asyncio.run(pub._run(None, None))  # type: ignore[arg-type]
    assert sent == [(0, 2)]
