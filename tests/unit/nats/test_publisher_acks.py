"""How a batch of publishes reads its acks (no server: the replies as the server sends them)."""

from __future__ import annotations

import asyncio

from replicator.nats.publisher import ANY_STREAM, _Batch


def ack(stream: str, seq: int) -> bytes:
    return f'{{"stream":"{stream}","seq":{seq}}}'.encode()


def batch(stream: str | None, sent: int) -> _Batch:
    b = _Batch(stream, 100, "1", sparse=False)
    b.sent = sent
    return b


def test_a_second_reply_to_one_message_is_not_taken_for_another_messages_ack() -> None:
    async def go() -> _Batch:
        b = batch(ANY_STREAM, 2)
        b.on_ack(0, ack("ADV", 1), None)
        b.on_ack(0, b'{"stream":"ADV","seq":1}', None)  # e.g. an application answering too
        return b

    b = asyncio.run(go())
    assert (b.acked, b.stored, b.all_acked.is_set()) == (1, 1, False)


def test_any_stream_takes_any_streams_ack_but_not_a_refusal() -> None:
    async def go() -> _Batch:
        b = batch(ANY_STREAM, 3)
        b.all_sent = True
        b.on_ack(0, ack("ADV", 1), None)
        b.on_ack(1, ack("OTHER", 7), None)
        b.on_ack(2, b"", "503")
        return b

    b = asyncio.run(go())
    assert (b.acked, b.stored) == (3, 2)
    assert [(r.index, r.reason) for r in b.outcome.failures] == [(2, "no stream stored it (status 503)")]


def test_a_named_stream_refuses_another_streams_ack() -> None:
    async def go() -> _Batch:
        b = batch("TARGET", 1)
        b.on_ack(0, ack("OTHER", 1), None)
        return b

    b = asyncio.run(go())
    assert b.stored == 0 and [r.reason for r in b.outcome.failures] == ["stored in stream OTHER"]
