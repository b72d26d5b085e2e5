"""Reliable advisories against a real server: each stored once by whichever stream holds its
subject, in one pipelined round; a batch published again stores nothing twice; one no stream
takes fails the batch with an error that names the fix, after every one a stream takes is
stored."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import create_stream, run
from nats_servers import NatsCluster

from harness.streams import read_all
from replicator.nats import advisories as advisories_module
from replicator.nats import publisher as publisher_module
from replicator.nats.advisories import publish_advisories
from replicator.nats.connect import open_connection
from replicator.nats.publisher import PublishError

pytestmark = pytest.mark.integration

Advisory = tuple[str, bytes, str]


def advisories(ids: range, subject: str = "adv.new.{i}") -> list[Advisory]:
    return [(subject.format(i=i), f'{{"i":{i}}}'.encode(), f"event-{i}") for i in ids]


def publish(url: str, advs: list[Advisory]) -> None:
    async def go() -> None:
        nc = await open_connection(url, name="test-advisories")
        try:
            await publish_advisories(nc, advs, reliable=True)
        finally:
            await nc.close()

    run(go())


def test_each_advisory_is_stored_once_in_order_in_one_round_and_a_replay_adds_nothing(
    nats_server: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = nats_server.url
    run(create_stream(url, "ADV", ["adv.>"]))
    rounds: list[int] = []
    real = publisher_module.PipelinedPublisher.publish

    async def counted(self: Any, messages: Any, *a: Any, **kw: Any) -> Any:
        rounds.append(len(messages))
        return await real(self, messages, *a, **kw)

    monkeypatch.setattr(advisories_module.PipelinedPublisher, "publish", counted)
    batch = advisories(range(5000))
    publish(url, batch)
    assert rounds == [5000]  # every ack taken as stored: nothing published a second time
    publish(url, batch[1000:3000])  # a batch replayed after a failure
    stored = run(read_all(url, "ADV"))
    assert [(m.subject, m.data) for m in stored] == [(s, d) for s, d, _ in batch]
    assert [m.headers for m in stored[:2]] == [[("Nats-Msg-Id", "event-0")], [("Nats-Msg-Id", "event-1")]]


def test_an_advisory_no_stream_takes_fails_the_batch_naming_the_fix_after_the_others_are_stored(
    nats_server: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(advisories_module, "ROUNDS", 3)  # the error, sooner
    url = nats_server.url
    run(create_stream(url, "ADV", ["adv.new.>"]))
    batch = [*advisories(range(3)), *advisories(range(3, 4), "adv.unheard.{i}"), *advisories(range(4, 7))]
    with pytest.raises(
        PublishError, match=r"adv\.unheard\.3 not stored: no stream stored it .*is there a stream"
    ):
        publish(url, batch)
    assert [m.subject for m in run(read_all(url, "ADV"))] == [f"adv.new.{i}" for i in (0, 1, 2, 4, 5, 6)]
