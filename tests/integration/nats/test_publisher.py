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
    url: str,
    stream: str,
    batches: list[list[tuple[str, bytes, dict[str, str]]]],
    ack_every: int = 1,
    landed: list[int] | None = None,
    fast_batch: bool = False,
    seqs: list[dict[int, int]] | None = None,
    **kw: int,
) -> list[PublishOutcome]:
    async def go() -> list[PublishOutcome]:
        nc = await open_connection(url, name="test-publisher")
        try:
            p = PipelinedPublisher(nc, stream, **kw)
            encoded = [[(s, d, encode_header_lines(h.items())) for s, d, h in b] for b in batches]
            outcomes = [
                await p.publish(
                    b,
                    timeout=30,
                    ack_every=ack_every,
                    fast_batch=fast_batch,
                    seqs=None if seqs is None else seqs[k],
                )
                for k, b in enumerate(encoded)
            ]
            if landed is not None:
                landed.append(p.landed)
            return outcomes
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


def test_recorded_sequences_are_the_streams_and_a_duplicate_names_its_first_copy(
    nats_server: NatsCluster,
) -> None:
    """What the fleet emulator's log rests on: each stored message's stream sequence."""
    run(create_stream(nats_server.url, "T", ["t.>"]))
    first = [(f"t.{i}", f"{i}".encode(), {"Nats-Msg-Id": f"id-{i}"}) for i in range(5)]
    again = [first[3], ("t.new", b"new", {"Nats-Msg-Id": "id-new"})]
    seqs: list[dict[int, int]] = [{}, {}]
    outcomes = publish(nats_server.url, "T", [first, again], seqs=seqs)
    stored = {m.data: m.seq for m in run(read_all(nats_server.url, "T"))}
    assert seqs[0] == {i: stored[f"{i}".encode()] for i in range(5)}
    assert seqs[1] == {0: stored[b"3"], 1: stored[b"new"]}
    assert outcomes[1].duplicates == 1


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


def _chained(n: int, refuse_at: int | None = None) -> list[tuple[str, bytes, dict[str, str]]]:
    """Copies chained as the sink chains them; the one at `refuse_at` names a stream that is not
    the target, so the server refuses it, and with it every copy after it."""
    out = []
    for i in range(n):
        h = {"Nats-Msg-Id": f"c:{i}"}
        if i:
            h["Nats-Expected-Last-Msg-Id"] = f"c:{i - 1}"
        if i == refuse_at:
            h["Nats-Expected-Stream"] = "NOPE"
        out.append((f"t.{i % 7}", str(i).encode(), h))
    return out


def test_sparse_acks_of_a_chain_vouch_for_every_copy_before_them(nats_server: NatsCluster) -> None:
    run(create_stream(nats_server.url, "T", ["t.>"]))
    landed: list[int] = []
    [outcome] = publish(nats_server.url, "T", [_chained(1000)], ack_every=64, max_pending=200, landed=landed)
    assert (outcome.published, outcome.failures, outcome.exact) == (1000, [], False)
    assert landed == [1000]
    assert [m.data for m in run(read_all(nats_server.url, "T"))] == [str(i).encode() for i in range(1000)]


def test_a_refusal_between_sparse_acks_is_reported_at_the_next_ack(nats_server: NatsCluster) -> None:
    run(create_stream(nats_server.url, "T", ["t.>"]))
    landed: list[int] = []
    [outcome] = publish(nats_server.url, "T", [_chained(1000, refuse_at=300)], ack_every=64, landed=landed)
    first = outcome.first_failure()
    assert first is not None and not outcome.exact
    # The next acked copy (index 319) stands for it; only copies before it are vouched for.
    assert first.index == 319 and first.code == 10070
    assert landed == [256]  # the last ack that said stored: index 255
    assert len(run(read_all(nats_server.url, "T"))) == 300


# Fast-ingest batches (nats-server 2.14+, a stream with allow_batched): one per publish call.


def test_fast_batches_arrive_complete_and_in_order_with_the_servers_acks(
    target_of_each_kind: tuple[NatsCluster, int],
) -> None:
    target, replicas = target_of_each_kind
    run(create_stream(target.url, "T", ["t.>"], num_replicas=replicas, allow_batched=True))
    batches = [
        [(f"t.{i % 7}", f"{b}:{i}".encode(), {"Nats-Msg-Id": f"{b}-{i}"}) for i in range(5000)]
        for b in range(2)
    ]
    landed: list[int] = []
    outcomes = publish(
        target.url, "T", [*batches, batches[1][-1:]], fast_batch=True, max_pending=1500, landed=landed
    )
    assert [(o.published, o.stored, o.failures, o.exact) for o in outcomes[:2]] == [
        (5000, 5000, [], True)
    ] * 2
    assert (outcomes[2].stored, outcomes[2].duplicates) == (1, 1)  # a batch of one, already stored
    assert landed == [10001]
    stored = run(read_all(target.url, "T"))
    assert [m.data for m in stored] == [d for b in batches for _, d, _ in b]


def test_a_refusal_ends_a_fast_batch_so_nothing_after_it_is_stored(
    target_of_each_kind: tuple[NatsCluster, int],
) -> None:
    """No chain in the headers: the batch alone keeps the copies after a refused one out, on a
    cluster too, and its outcome is exact with sparse acks."""
    target, replicas = target_of_each_kind
    run(create_stream(target.url, "T", ["t.>"], num_replicas=replicas, allow_batched=True))
    batch = [(f"t.{i % 7}", str(i).encode(), {"Nats-Msg-Id": f"c:{i}"}) for i in range(3000)]
    batch[1200] = ("t.x", b"refused", {"Nats-Msg-Id": "c:1200", "Nats-Expected-Stream": "NOPE"})
    landed: list[int] = []
    [outcome] = publish(target.url, "T", [batch], fast_batch=True, landed=landed)
    first = outcome.first_failure()
    assert outcome.exact and first is not None
    assert first.index == 1200 and "expected stream" in first.reason
    assert (outcome.stored, landed) == (1200, [1200])
    assert [m.data for m in run(read_all(target.url, "T"))] == [str(i).encode() for i in range(1200)]


def test_a_fast_batch_to_a_stream_that_does_not_allow_it_stores_nothing_and_says_why(
    nats_server: NatsCluster,
) -> None:
    run(create_stream(nats_server.url, "T", ["t.>"]))
    batch = [(f"t.{i}", b"x", {"Nats-Msg-Id": f"c:{i}"}) for i in range(100)]
    [outcome] = publish(nats_server.url, "T", [batch], fast_batch=True)
    first = outcome.first_failure()
    assert first is not None and first.index == 0 and "batch publish" in first.reason.lower()
    assert outcome.stored == 0
    assert run(read_all(nats_server.url, "T")) == []


def test_a_fast_batch_into_a_stream_that_fills_up_ends_there_without_waiting_out_the_deadline(
    target_of_each_kind: tuple[NatsCluster, int],
) -> None:
    """A refusal the server may not end the batch on (a full stream, discard new): the outcome
    ends at once, never vouching for a copy the stream does not hold."""
    target, replicas = target_of_each_kind
    run(
        create_stream(
            target.url, "T", ["t.>"], num_replicas=replicas, allow_batched=True, max_msgs=1000, discard="new"
        )
    )
    batch = [(f"t.{i % 7}", str(i).encode(), {"Nats-Msg-Id": f"c:{i}"}) for i in range(3000)]
    landed: list[int] = []
    [outcome] = publish(target.url, "T", [batch], fast_batch=True, landed=landed)
    first = outcome.first_failure()
    assert first is not None and first.index >= outcome.stored
    assert outcome.stored <= 1000 and landed == [outcome.stored]
    held = [m.data for m in run(read_all(target.url, "T"))]
    # A prefix of the batch, in order, holding every copy the outcome vouches for.
    assert held == [str(i).encode() for i in range(len(held))] and outcome.stored <= len(held)
    # Filled to its limit. A clustered stream refused the 1000th once in CI, with 999 held and
    # no copy vouched for beyond them: its leader counts the messages stored plus those in
    # flight, and one just stored but not yet taken off the in-flight count counts twice
    # (nats-server, checkMsgHeadersPreClusteredProposal and applyStreamMsgOp). Full within a
    # few messages there; a later publish from the target's tail stores the rest.
    full = len(held) == 1000 if replicas == 1 else 990 <= len(held) <= 1000
    assert full, (len(held), outcome.stored, outcome.failures[:3])
