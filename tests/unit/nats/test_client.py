"""The replicator's client publishes exactly what nats-py publishes (its one dependence on
nats-py's internals, checked on the wire command itself)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.errors import BadSubjectError

from replicator.nats import wire
from replicator.nats.client import ReplicatorClient


def _captured_command(client: Any, publish: Callable[[Any], Awaitable[None]]) -> bytes:
    """The wire command a publish queues (no server: the client is put into a connected state
    and its send queue captured)."""
    sent: list[bytes] = []

    async def capture(cmd: bytes, priority: bool = False) -> None:
        sent.append(cmd)

    client._send_command = capture
    client._flush_queue = None
    client._status = client.CONNECTED
    client._max_payload = 1 << 20
    asyncio.run(publish(client))
    [cmd] = sent
    return cmd


@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9\-_.]{0,20}", fullmatch=True) | st.just(" Padded "),
        st.text(max_size=30),
        max_size=6,
    ),
    st.binary(max_size=50),
)
def test_a_pre_encoded_publish_is_byte_for_byte_nats_pys(headers: dict[str, str], data: bytes) -> None:
    want = _captured_command(Client(), lambda c: c.publish("a.b", data, reply="_INBOX.x", headers=headers))
    lines = wire.encode_header_lines(headers.items())
    got = _captured_command(ReplicatorClient(), lambda c: c.publish_encoded("a.b", "_INBOX.x", lines, data))
    assert got == want


def test_repeated_names_go_out_as_repeated_lines() -> None:
    lines = wire.encode_header_lines([("X-Tag", "a"), ("X-Tag", "b")])
    got = _captured_command(ReplicatorClient(), lambda c: c.publish_encoded("a.b", "", lines, b"x"))
    assert got == b"HPUB a.b  32 33\r\nNATS/1.0\r\nX-Tag: a\r\nX-Tag: b\r\n\r\nx\r\n"


def test_bad_subjects_are_refused_as_nats_py_refuses_them() -> None:
    with pytest.raises(BadSubjectError):
        asyncio.run(ReplicatorClient().publish_encoded("a b", "", b"", b""))


# The parser: what a raw subscription's handler and nats-py's own dispatch receive, in order,
# is exactly what nats-py's parser would deliver, however the bytes are split across reads.

RAW_SIDS = (1, 2)  # raw subscriptions; sid 3 is an ordinary one


class _Recorder:
    """The parts of the client a parser calls, recording every message and control op in
    the order they are dispatched."""

    def __init__(self, raw: bool) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.stats = {"in_msgs": 0, "in_bytes": 0}
        self._raw_handlers = (
            {
                sid: (lambda s, r, d, h, sid=sid: self.events.append(("msg", sid, s, r, d, h)))
                for sid in RAW_SIDS
            }
            if raw
            else {}
        )

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> None:
        self.events.append(("msg", sid, bytes(subject), bytes(reply), data, headers))

    async def _process_ping(self) -> None:
        self.events.append(("ping",))

    async def _process_pong(self) -> None:
        self.events.append(("pong",))

    async def _process_err(self, err: str) -> None:
        self.events.append(("err", err))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.events.append(("info", info))


def _message(sid: int, subject: str, reply: str, headers: bytes, payload: bytes) -> bytes:
    r = f" {reply}" if reply else ""
    if headers:
        block = b"NATS/1.0\r\n" + headers + b"\r\n"
        return (
            f"HMSG {subject} {sid}{r} {len(block)} {len(block) + len(payload)}\r\n".encode()
            + block
            + payload
            + b"\r\n"
        )
    return f"MSG {subject} {sid}{r} {len(payload)}\r\n".encode() + payload + b"\r\n"


_ops = st.one_of(
    st.builds(
        _message,
        st.sampled_from((1, 2, 3)),
        st.from_regex(r"[a-z]{1,5}(\.[a-z0-9]{1,4}){0,3}", fullmatch=True),
        st.sampled_from(("", "_INBOX.abc.1", "$JS.ACK.S.C.1.2.3.4.0")),
        st.sampled_from((b"", b"Nats-Sequence: 4\r\n", b"A: b\r\nNats-Subject: x.y\r\n")),
        st.binary(max_size=300) | st.just(b"MSG 1 2 3\r\n"),
    ),
    st.sampled_from((b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b"-ERR 'Slow Consumer'\r\n", b'INFO {"a":1}\r\n')),
)


@given(st.lists(_ops, max_size=30), st.lists(st.integers(min_value=1, max_value=400), max_size=20))
def test_raw_messages_are_cut_as_nats_pys_parser_cuts_them(ops: list[bytes], cuts: list[int]) -> None:
    from nats.protocol.parser import Parser

    from replicator.nats.client import RawFirstParser

    stream = b"".join(ops)
    reads, at = [], 0
    for n in cuts:
        reads.append(stream[at : at + n])
        at += n
    reads.append(stream[at:])

    def dispatched(parser_class: type[Parser], raw: bool) -> list[tuple[Any, ...]]:
        nc = _Recorder(raw)
        parser = parser_class(nc)

        async def feed() -> None:
            for chunk in reads:
                await parser.parse(chunk)

        asyncio.run(feed())
        assert not parser.buf
        return nc.events

    assert dispatched(RawFirstParser, raw=True) == dispatched(Parser, raw=False)


def test_a_malformed_raw_message_is_a_protocol_error() -> None:
    from nats.errors import ProtocolError

    from replicator.nats.client import RawFirstParser

    nc = _Recorder(raw=True)
    with pytest.raises(ProtocolError):  # nats-py would misread what follows; this stops
        asyncio.run(RawFirstParser(nc).parse(b"MSG a 1 3\r\nabcd\r\n"))  # type: ignore[arg-type]


def test_a_raw_handler_that_fails_loses_its_message_only() -> None:
    """A reply the handler cannot read (a non-JSON ack, say) must not end the read loop: the
    connection would hear nothing more until its pings ran out (issue 28, hole 9)."""
    from replicator.nats.client import RawFirstParser

    nc = _Recorder(raw=True)
    got: list[bytes] = []

    def fussy(subject: bytes, _reply: bytes, data: bytes, _headers: Any) -> None:
        if data == b"not json":
            raise ValueError("cannot read it")
        got.append(data)

    nc._raw_handlers = {1: fussy}
    wire_bytes = _message(1, "a.b", "", b"", b"not json") + _message(1, "a.b", "", b"", b"{}")
    asyncio.run(RawFirstParser(nc).parse(wire_bytes))  # type: ignore[arg-type]
    assert got == [b"{}"]
