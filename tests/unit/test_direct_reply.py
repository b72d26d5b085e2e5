"""The wire-level shortcuts (direct-get reply parsing, pre-encoded header publishing) give
exactly what nats-py's own code gives."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.errors import BadHeaderError, BadSubjectError

from replicator.nats.connect import FastHeaderClient, encode_headers
from replicator.nats.direct_reply import is_status, parse_direct_reply, status_code
from replicator.nats.jetstream import _clean_headers
from replicator.nats.timestamps import rfc3339_to_ns

STAMP = "2026-11-23T04:10:01.12345678Z"


def server_reply(own: bytes, seq: int = 42, subject: str = "a.b.c", stamp: str = STAMP) -> bytes:
    return (
        b"NATS/1.0\r\n"
        + own
        + f"Nats-Stream: S\r\nNats-Subject: {subject}\r\nNats-Sequence: {seq}\r\n"
        f"Nats-Time-Stamp: {stamp}\r\n\r\n".encode()
    )


def via_nats_py(raw: bytes) -> tuple[int, str, int, dict[str, str] | None]:
    h = asyncio.run(FastHeaderClient()._process_headers(raw))
    assert h is not None
    return int(h["Nats-Sequence"]), h["Nats-Subject"], rfc3339_to_ns(h["Nats-Time-Stamp"]), _clean_headers(h)


@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9\-_.]{0,20}", fullmatch=True),
        st.text(max_size=30).filter(lambda v: "\r" not in v and "\n" not in v),
        max_size=6,
    ),
    st.integers(1, 2**63 - 1),
)
def test_parse_equals_nats_py(own: dict[str, str], seq: int) -> None:
    raw = server_reply(b"".join(f"{k}: {v}\r\n".encode() for k, v in own.items()), seq=seq)
    assert parse_direct_reply(raw) == via_nats_py(raw)


def test_odd_header_lines_are_treated_as_nats_py_treats_them() -> None:
    own = b"Bad Name: x\r\n\x1cX: y\r\nNoColon\r\n  Padded  :  v  \r\nK: 1\r\nK: 2\r\nNats-Msg-Id: id:7\r\n"
    raw = server_reply(own)
    got = parse_direct_reply(raw)
    assert got[3] == {"Padded": "v", "K": "2", "Nats-Msg-Id": "id:7"}
    assert got == via_nats_py(raw)


def test_status_replies_end_a_batch() -> None:
    assert is_status(b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 9\r\n\r\n")
    assert is_status(b"NATS/1.0 404 Message Not Found\r\n\r\n")
    assert is_status(None)
    assert not is_status(server_reply(b""))


def test_a_status_replys_code_is_read_and_an_ack_has_none() -> None:
    # A publish to a subject no stream listens on is answered `503` (no responders).
    assert status_code(b"NATS/1.0 503\r\n\r\n") == "503"
    assert status_code(b"NATS/1.0 404 Message Not Found\r\n\r\n") == "404"
    assert status_code(None) is None
    assert status_code(server_reply(b"")) is None


def test_a_reply_without_the_servers_headers_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="without Nats-Sequence"):
        parse_direct_reply(b"NATS/1.0\r\nNats-Subject: a\r\n\r\n")


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
def test_encoded_headers_publish_exactly_what_nats_py_publishes(headers: dict[str, str], data: bytes) -> None:
    want = _captured_command(Client(), lambda c: c.publish("a.b", data, reply="_INBOX.x", headers=headers))
    lines = encode_headers(headers.items())
    got = _captured_command(FastHeaderClient(), lambda c: c.publish_encoded("a.b", "_INBOX.x", lines, data))
    assert got == want


def test_bad_header_names_and_subjects_are_refused_as_nats_py_refuses_them() -> None:
    with pytest.raises(BadHeaderError):
        encode_headers([("a(b", "x")])
    with pytest.raises(BadSubjectError):
        asyncio.run(FastHeaderClient().publish_encoded("a b", "", b"", b""))
