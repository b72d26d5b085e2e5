"""The pipelined publisher against a real server: every message acknowledged, in order, and
every kind of refusal reported (never a silent loss)."""

from __future__ import annotations

import asyncio

from helpers import create_stream, run
from nats_servers import NatsCluster

from harness.streams import read_all
from replicator.nats.connect import open_connection
from replicator.nats.publisher import PipelinedPublisher, PublishOutcome
from replicator.nats.wire import encode_header_lines


def publish(
    url: str, stream: str, batches: list[list[tuple[str, bytes, dict[str, str]]]], **kw: int
) -> list[PublishOutcome]:
    async def go() -> list[PublishOutcome]:
        nc = await open_connection(url, name="test-publisher")
        try:
            p = PipelinedPublisher(nc, stream, **kw)
            encoded = [[(s, d, encode_header_lines(h.items())) for s, d, h in b] for b in batches]
            return [await p.publish(b, timeout=30) for b in encoded]
        finally:
            await nc.close()

    return asyncio.run(go())


def test_batches_larger_than_the_pending_window_arrive_complete_and_in_order(
    nats_server: NatsCluster,
) -> None:
    run(create_stream(nats_server.url, "T", ["t.>"]))
    batches = [
        [(f"t.{b}.{i}", f"{b}:{i}".encode(), {"Nats-Msg-Id": f"{b}-{i}"}) for i in range(3000)]
        for b in range(3)
    ]
    outcomes = publish(nats_server.url, "T", batches, max_pending=500)
    assert [(o.published, o.duplicates, o.failures) for o in outcomes] == [(3000, 0, [])] * 3
    stored = run(read_all(nats_server.url, "T"))
    assert [m.data for m in stored] == [d for b in batches for _, d, _ in b]
    assert stored[5].headers == [("Nats-Msg-Id", "0-5")]


def test_duplicates_are_counted_not_stored(nats_server: NatsCluster) -> None:
    run(create_stream(nats_server.url, "T", ["t.>"]))
    first = [(f"t.{i}", b"x", {"Nats-Msg-Id": f"id-{i}"}) for i in range(10)]
    again = [*first[5:], ("t.new", b"y", {"Nats-Msg-Id": "id-new"})]
    outcomes = publish(nats_server.url, "T", [first, again])
    assert (outcomes[1].published, outcomes[1].duplicates, outcomes[1].failures) == (6, 5, [])
    assert len(run(read_all(nats_server.url, "T"))) == 11


def test_refusals_are_reported_with_their_position(nats_server: NatsCluster) -> None:
    run(create_stream(nats_server.url, "T", ["t.>"]))
    run(create_stream(nats_server.url, "OTHER", ["o.>"]))
    batch = [
        ("t.ok", b"1", {}),
        ("nowhere.x", b"2", {}),  # no stream listens: a 503 status reply
        ("o.x", b"3", {}),  # stored, but in another stream
        ("t.bad", b"4", {"Nats-Expected-Stream": "NOPE"}),  # refused by the server
    ]
    [outcome] = publish(nats_server.url, "T", [batch])
    reasons = {r.index: r.reason for r in outcome.failures}
    assert sorted(reasons) == [1, 2, 3]
    assert "503" in reasons[1]
    assert "OTHER" in reasons[2]
    assert "expected stream" in reasons[3]
