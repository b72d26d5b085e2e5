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
