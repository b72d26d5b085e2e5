"""How a batch of publishes reads its acks (no server: the replies as the server sends them)."""

from __future__ import annotations

import asyncio

import pytest

from replicator.nats.publisher import ANY_STREAM, _Batch
from replicator.nats.wire import ack_seq


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


@pytest.mark.parametrize(
    ("reply", "seq"),
    [
        (b'{"stream":"S","seq":42}', 42),
        (b'{"stream":"S","domain":"hub","seq":7,"duplicate":true}', 7),
        (b'{"stream":"S", "seq": 9}', 9),
        (b'{"error":{"code":503}}', 0),
    ],
)
def test_an_acks_sequence_is_read_without_parsing_the_json(reply: bytes, seq: int) -> None:
    assert ack_seq(reply) == seq


def test_recorded_sequences_are_those_of_stored_messages_only() -> None:
    async def go() -> _Batch:
        b = _Batch(ANY_STREAM, 100, "1", sparse=False, seqs={})
        b.sent = 3
        b.on_ack(0, ack("S", 10), None)
        b.on_ack(1, b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence"}}', None)
        b.on_ack(2, ack("S", 11), None)
        return b

    assert asyncio.run(go()).seqs == {0: 10, 2: 11}


def test_the_last_message_stored_now_is_kept_not_a_duplicate_nor_a_refusal() -> None:
    """Where one of a batch's messages is known stored (the live mark names it): the last an ack
    said was stored now. A duplicate's ack names the message stored before, not this one."""

    async def go() -> _Batch:
        b = batch("T", 4)
        b.on_ack(1, ack("T", 11), None)
        b.on_ack(0, ack("T", 10), None)
        b.on_ack(2, b'{"stream":"T","seq":5,"duplicate":true}', None)
        b.on_ack(3, b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence"}}', None)
        return b

    b = asyncio.run(go())
    assert b.top[0] == 1 and ack_seq(b.top[1]) == 11


def test_a_refusal_caused_by_the_targets_configuration_names_the_fix() -> None:
    async def go() -> _Batch:
        b = batch("TARGET", 2)
        b.on_ack(
            0, b'{"error":{"code":400,"err_code":10166,"description":"per-message TTL is disabled"}}', None
        )
        b.on_ack(1, b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 7"}}', None)
        return b

    b = asyncio.run(go())
    assert [(r.index, r.reason, r.code) for r in b.outcome.failures] == [
        (
            0,
            "per-message TTL is disabled (code 10166): allow them on the target stream (allow_msg_ttl), as on the source",
            10166,
        ),
        (1, "wrong last sequence: 7 (code 10071)", 10071),
    ]
