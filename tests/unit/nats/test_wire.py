"""The wire format, byte for byte against nats-py: header blocks (repeated names kept), status
replies, direct-get replies, delivery reply subjects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client

from replicator.nats import wire
from replicator.nats.timestamps import rfc3339_to_ns

STAMP = "2026-11-23T04:10:01.12345678Z"
NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9\-_.]{0,20}", fullmatch=True)
VALUES = st.text(max_size=30).filter(lambda v: "\r" not in v and "\n" not in v)


def server_reply(own: bytes, seq: int = 42, subject: str = "a.b.c", stamp: str = STAMP) -> bytes:
    return (
        b"NATS/1.0\r\n"
        + own
        + f"Nats-Stream: S\r\nNats-Subject: {subject}\r\nNats-Sequence: {seq}\r\n"
        f"Nats-Time-Stamp: {stamp}\r\n\r\n".encode()
    )


def nats_py_headers(block: bytes) -> dict[str, str] | None:
    return asyncio.run(Client()._process_headers(block))


@given(st.lists(st.tuples(NAMES, VALUES), max_size=8), st.integers(1, 2**63 - 1))
def test_a_direct_reply_parses_as_nats_py_parses_it_keeping_every_repeated_value(
    own: list[tuple[str, str]], seq: int
) -> None:
    block = server_reply(b"".join(f"{k}: {v}\r\n".encode() for k, v in own), seq=seq)
    got_seq, subject, ts, headers = wire.parse_direct_reply(block)
    h = nats_py_headers(block)
    assert h is not None
    assert (got_seq, subject, ts) == (int(h["Nats-Sequence"]), h["Nats-Subject"], rfc3339_to_ns(STAMP))
    # Every pair, in order; each value as nats-py reads it on its own.
    own_kept = [(k, v) for k, v in own if k not in wire.SERVER_HEADERS]
    alone = [nats_py_headers(f"NATS/1.0\r\n{k}: {v}\r\n\r\n".encode()) or {} for k, v in own_kept]
    assert (headers or []) == [(k, h1[k]) for (k, _), h1 in zip(own_kept, alone, strict=True)]
    # nats-py keeps the last value of a repeated name; the same pairs in a dict agree with it.
    nats_py_own = {k: v for k, v in h.items() if k not in wire.SERVER_HEADERS}
    assert dict(headers or []) == nats_py_own


def test_repeated_names_keep_every_value_in_order() -> None:
    block = b"NATS/1.0\r\nX-Tag: a\r\nOther: 1\r\nX-Tag: b\r\nX-Tag: c\r\n\r\n"
    assert wire.parse_headers(block) == [("X-Tag", "a"), ("Other", "1"), ("X-Tag", "b"), ("X-Tag", "c")]
    assert wire.first_value(wire.parse_headers(block), "X-Tag") == "a"
    assert wire.first_value(None, "X-Tag") is None


def test_odd_header_lines_are_skipped_as_nats_py_skips_them() -> None:
    own = b"Bad Name: x\r\n\x1cX: y\r\nNoColon\r\n  Padded  :  v  \r\nK: 1\r\nK: 2\r\n\xff: z\r\nNats-Msg-Id: id:7\r\n"
    block = server_reply(own)
    got = wire.parse_direct_reply(block)[3]
    assert got == [("Padded", "v"), ("K", "1"), ("K", "2"), ("Nats-Msg-Id", "id:7")]
    h = nats_py_headers(block)
    assert h is not None and dict(got) == {k: v for k, v in h.items() if k not in wire.SERVER_HEADERS}


NOT_UTF8_LINES = (
    b"X-Latin1: caf\xe9\r\nX-Half: \xe6\x97\r\nX-Ok: d\xc3\xa9j\xc3\xa0\r\nNats-Msg-Id: id:\xff\r\n"
)
# Lines no client library here would send, that a server stores and a copy must keep: names that
# are not RFC 7230 tokens, values whose edges Python's str.strip would cut.
ODD_LINES = b"X(1): v\r\nX@y: 1\r\nX-Edge: x\x1f\r\nX-Nbsp: \xc2\xa0x\xc2\xa0\r\n"


@pytest.mark.parametrize(
    "read",
    [
        lambda: wire.parse_headers(b"NATS/1.0\r\n" + NOT_UTF8_LINES + b"\r\n"),
        lambda: wire.parse_direct_reply(server_reply(NOT_UTF8_LINES))[3],
        # A server header among them: the direct reply is read line by line.
        lambda: wire.parse_direct_reply(server_reply(NOT_UTF8_LINES + b"Nats-Stream: X\r\n"))[3],
    ],
    ids=["stored-block", "direct-reply", "direct-reply-line-by-line"],
)
def test_header_values_that_are_not_utf8_are_written_back_byte_for_byte(read: Any) -> None:
    """A value that is not UTF-8 is the sender's bytes: read and written again, the lines are
    the same bytes."""
    headers = read()
    assert headers is not None
    assert wire.encode_read_header_lines(headers) == NOT_UTF8_LINES
    readable = [(k, wire.readable(v)) for k, v in headers]
    assert readable == [
        ("X-Latin1", "caf\ufffd"),
        ("X-Half", "\ufffd\ufffd"),
        ("X-Ok", "déjà"),
        ("Nats-Msg-Id", "id:\ufffd"),
    ]
    assert [wire.is_utf8(v) for _, v in headers] == [False, False, True, False]
    assert wire.first_value(headers, "Nats-Msg-Id") is not None
    assert wire.wire_bytes(wire.first_value(headers, "Nats-Msg-Id") or "") == b"id:\xff"


def test_header_lines_a_client_here_would_not_send_are_written_back_as_read() -> None:
    """What a server stored is written back as read; encode_header_lines, which makes headers as
    nats-py's publish does, refuses such a name and trims such values."""
    headers = wire.parse_headers(b"NATS/1.0\r\n" + ODD_LINES + b"\r\n")
    assert [k for k, _ in headers] == ["X(1)", "X@y", "X-Edge", "X-Nbsp"]
    assert wire.encode_read_header_lines(headers) == ODD_LINES
    with pytest.raises(wire.WireError, match="not a valid NATS header name"):
        wire.encode_header_lines(headers)
    assert wire.encode_header_lines(headers[2:]) == b"X-Edge: x\r\nX-Nbsp: x\r\n"


def test_a_subject_that_is_not_utf8_is_read_and_published_byte_for_byte() -> None:
    """A strict decode failed the read, and the entry retried it for ever."""
    bad = b"Nats-Subject: a.caf\xe9"
    for own in (b"X-A: 1\r\n", b"X-A: 1\r\nNats-Stream: X\r\n"):  # whole-block match, line by line
        block = server_reply(own).replace(b"Nats-Subject: a.b.c", bad)
        assert bad in block
        _, subject, _, _ = wire.parse_direct_reply(block)
        assert wire.wire_bytes(subject) == b"a.caf\xe9" and wire.readable(subject) == "a.caf\ufffd"
        assert wire.pub(subject, "r", b"x") == b"PUB a.caf\xe9 r 1\r\nx\r\n"


def test_status_replies_end_a_batch_and_give_their_code() -> None:
    assert wire.is_status(b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 9\r\n\r\n")
    assert wire.is_status(b"NATS/1.0 404 Message Not Found\r\n\r\n")
    assert wire.is_status(None)
    assert not wire.is_status(server_reply(b""))
    # A publish to a subject no stream listens on is answered `503` (no responders).
    assert wire.status_code(b"NATS/1.0 503\r\n\r\n") == "503"
    assert wire.status_code(b"NATS/1.0 408 Request Timeout\r\n\r\n") == "408"
    assert wire.status_code(None) is None
    assert wire.status_code(server_reply(b"")) is None


def test_a_reply_without_the_servers_headers_is_a_clear_error() -> None:
    with pytest.raises(wire.WireError, match="without Nats-Sequence"):
        wire.parse_direct_reply(b"NATS/1.0\r\nNats-Subject: a\r\n\r\n")


@given(st.lists(st.tuples(NAMES | st.just(" Padded "), st.text(max_size=30)), max_size=6))
def test_encoded_header_lines_are_what_nats_py_would_send_for_unique_names(
    headers: list[tuple[str, str]],
) -> None:
    unique = dict(headers)
    lines = wire.encode_header_lines(unique.items())
    # nats-py builds the block inside publish(); its result, parsed, is what we encoded.
    block = wire.header_block(lines)
    assert nats_py_headers(block) == (
        {
            k.strip(): v.strip().replace("\r", " ").replace("\n", " ").strip()
            for k, v in unique.items()
            if k.strip()
        }
        or None
    )


def test_bad_header_names_are_refused() -> None:
    with pytest.raises(wire.WireError, match="not a valid NATS header name"):
        wire.encode_header_lines([("a(b", "x")])
    with pytest.raises(wire.WireError, match="invalid subject"):
        wire.check_subject("a b")


def test_delivery_reply_subjects_give_sequence_time_and_pending() -> None:
    assert wire.parse_ack_subject("$JS.ACK.ORDERS.c1.1.42.7.1700000000000000000.3") == (
        42,
        1_700_000_000_000_000_000,
        3,
    )
    # The form with a domain and an account hash (and a trailing token).
    assert wire.parse_ack_subject("$JS.ACK.hub.ACC.ORDERS.c1.1.42.7.1700000000000000000.0.xyz") == (
        42,
        1_700_000_000_000_000_000,
        0,
    )
    with pytest.raises(wire.WireError):
        wire.parse_ack_subject("_INBOX.abc")


@given(
    st.lists(st.tuples(NAMES | st.sampled_from(sorted(wire.SERVER_HEADERS)), VALUES), max_size=5),
    st.integers(1, 2**63 - 1),
    st.sampled_from(
        (b"", b"Nats-Num-Pending: 7\r\nNats-Last-Sequence: 41\r\n", b"Nats-UpTo-Sequence: 9\r\n")
    ),
)
def test_a_reply_as_the_server_writes_it_parses_as_one_read_line_by_line(
    own: list[tuple[str, str]], seq: int, batch_lines: bytes
) -> None:
    """The whole-block match (the usual reply) gives what reading every line gives, whether the
    message's own headers are plain, repeat the server's names, or the reply is a batch's."""
    block = server_reply(b"".join(f"{k}: {v}\r\n".encode() for k, v in own), seq=seq)
    block = block[:-2] + batch_lines + b"\r\n"
    assert wire.parse_direct_reply(block) == wire._parse_direct_reply_lines(block)
