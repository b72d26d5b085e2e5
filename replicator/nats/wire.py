"""The NATS wire format the replicator reads and writes itself: header blocks, status replies,
direct-get replies, JetStream ack subjects and HPUB commands. Plain functions on bytes.

Headers are a list of (name, value) pairs in wire order: a name may repeat (NATS headers are
multi-valued, like HTTP's), and a copy must carry every value. Reading follows nats-py's rules
(lines without a colon and names with blanks or not ASCII skipped, values trimmed of ASCII
blanks), except that a value keeps bytes that are not UTF-8 (TEXT_ERRORS). A copy's lines are
written back as read (encode_read_header_lines). encode_header_lines encodes headers as
nats-py's publish does: the tests publish their data with it, and heartbeats' names are checked
as it checks them (HEADER_NAME). tests/unit/nats/test_wire.py checks both against nats-py, and
the integration tests against what nats-server stores.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from replicator.nats.timestamps import rfc3339_to_ns

Headers = list[tuple[str, str]]

HEADER_LINE = b"NATS/1.0"
CRLF = b"\r\n"
# What a header block adds around its lines: the `NATS/1.0` line and the closing blank line.
HEADER_FRAME = len(HEADER_LINE) + 2 * len(CRLF)

# Headers the server adds to a direct-get reply: they describe the stored message, they are not
# part of it, so they are not copied. (A reply's status is on its first line, `NATS/1.0 404 ...`:
# a stored message's own `Status` or `Description` header is the sender's, and copied.)
SERVER_HEADERS = frozenset(
    {
        "Nats-Stream",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Subject",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
        "Nats-UpTo-Sequence",
    }
)
_SERVER_HEADER_BYTES = frozenset(h.encode() for h in SERVER_HEADERS)

# What nats-py accepts as a header name when publishing (RFC 7230 tokens).
HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A value that needs no change to be one header line: printable ASCII, no edge spaces.
HEADER_VALUE_SAFE = re.compile(r"[!-~]+(?: [!-~]+)*")
# A received name holding one of these is skipped, as nats-py skips it (the ASCII characters
# str.isspace() accepts).
_HEADER_NAME_BLANK = re.compile(rb"[\s\x1c-\x1f]")
_VALUE_LINE_BREAKS = str.maketrans({"\r": " ", "\n": " "})
_SUBJECT_INVALID = re.compile(r"[ \t\r\n]")


# Subjects and header values are bytes on the wire, and nearly all are UTF-8. One that is not is
# read with each bad byte as a lone surrogate (U+DC80-U+DCFF) and written back with the same
# byte, so a copy keeps the sender's bytes exactly (a strict decode failed the read, and the
# entry retried it for ever). Such text cannot go into Arrow or JSON as it is: see readable, and
# replicator.spark.rows for the `subject_bytes` and `header_bytes` columns that carry it.
TEXT_ERRORS = "surrogateescape"


def wire_text(raw: bytes) -> str:
    """A subject's or header value's bytes as read from the wire (see TEXT_ERRORS)."""
    return raw.decode("utf-8", TEXT_ERRORS)


def wire_bytes(text: str) -> bytes:
    """A subject or header value as it goes on the wire: UTF-8, a byte read from text that was
    not UTF-8 given back as it was."""
    return text.encode("utf-8", TEXT_ERRORS)


def is_utf8(text: str) -> bool:
    """Whether text read from the wire was valid UTF-8 (holds no escaped byte)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# Each escaped byte as U+FFFD: one per byte, as Go's encoding/json writes a string that is not
# UTF-8 (Python's "replace" gives one per bad sequence: two bytes of a cut character, one).
_ESCAPED_AS_REPLACEMENT = {b: "\ufffd" for b in range(0xDC80, 0xDD00)}


def readable(text: str) -> str:
    """Text read from the wire as text anything can hold: each byte that was not UTF-8 shown as
    U+FFFD."""
    return text if is_utf8(text) else text.translate(_ESCAPED_AS_REPLACEMENT)


class WireError(ValueError):
    """Bytes or values that cannot be put on (or read from) the wire."""


def encode_header_lines(headers: Iterable[tuple[str, str]]) -> bytes:
    """The `Name: value\\r\\n` lines of a header block (without the `NATS/1.0` line and the
    closing blank line), every pair kept in order, made as nats-py's publish makes them: names
    checked, values trimmed and on one line."""
    out = bytearray()
    for name, value in headers:
        key = name.strip()
        if not key:
            continue
        if not HEADER_NAME.fullmatch(key):
            raise WireError(f"header name {key!r} is not a valid NATS header name")
        out += b"%s: %s\r\n" % (key.encode(), wire_bytes(value.strip().translate(_VALUE_LINE_BREAKS)))
    return bytes(out)


def encode_read_header_lines(headers: Iterable[tuple[str, str]]) -> bytes:
    """Header lines of pairs read from the wire (parse_header_lines), written back as they were
    read: a stored message's names and values are its sender's, and a server that stored them
    takes them again. Not what encode_header_lines checks and trims, which would stop the copy
    for ever at a name that is not an RFC 7230 token (`X(1)`, from a client that does not check
    names or a raw publisher), and cut a value's edge characters that Python counts as blanks
    (U+00A0, \x1f). Only for pairs read from the wire: their names hold no blank, colon or line
    break, and their values no CR LF."""
    return b"".join([b"%s: %s\r\n" % (name.encode(), wire_bytes(value)) for name, value in headers])


def header_block(lines: bytes) -> bytes:
    """A whole header block around lines from `encode_header_lines`."""
    return HEADER_LINE + CRLF + lines + CRLF


def parse_header_lines(lines: Iterable[bytes]) -> Headers:
    """(name, value) pairs of `Name: value` lines; lines without a colon and names nats-py would
    not accept (blank characters, not ASCII) are skipped, as nats-py skips them."""
    out: Headers = []
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name = name.strip()
        if _HEADER_NAME_BLANK.search(name):
            continue
        try:
            key = name.decode("ascii")
        except UnicodeDecodeError:
            continue
        out.append((key, wire_text(value.strip())))
    return out


def parse_headers(block: bytes | None) -> Headers:
    """Every (name, value) of a header block (`NATS/1.0[ status]\\r\\nName: value\\r\\n...`)."""
    if not block:
        return []
    return parse_header_lines(block.split(CRLF)[1:])


def first_value(headers: Headers | None, name: str) -> str | None:
    """The first value of `name` (as Go's `nats.Header.Get` gives it), None when absent."""
    for k, v in headers or ():
        if k == name:
            return v
    return None


def status_code(block: bytes | None) -> str | None:
    """The code of a status message, whose header block starts `NATS/1.0 503 ...`; else None."""
    return block[9:12].decode() if block and block[8:9] == b" " else None


def is_status(block: bytes | None) -> bool:
    """A status reply (`NATS/1.0 204 EOB`, `NATS/1.0 404 ...`) ends a direct-get batch; so does a
    reply without headers, which a direct get never sends for a stored message."""
    return not block or status_code(block) is not None


# A direct-get reply as the server writes it: the stored message's own header lines, then the
# server's in this order (a batched get adds the last two). Matched whole, it needs no loop over
# its lines; any other block is read line by line (`_parse_direct_reply_lines`).
_DIRECT_REPLY = re.compile(
    rb"NATS/1\.0\r\n((?:[^\r\n]*\r\n)*?)"
    rb"Nats-Stream: [^\r\n]*\r\nNats-Subject: ([^\s]+)\r\nNats-Sequence: (\d+)\r\n"
    rb"Nats-Time-Stamp: ([^\s]+)\r\n(?:Nats-(?:Num-Pending|Last-Sequence|UpTo-Sequence): \d+\r\n)*\r\n"
)


def parse_direct_reply(block: bytes) -> tuple[int, str, int, Headers | None]:
    """(sequence, subject, time in ns, the stored message's own headers) from a direct-get
    reply's header block. Raises WireError when one of the server's headers is missing."""
    m = _DIRECT_REPLY.fullmatch(block)
    if m is None:
        return _parse_direct_reply_lines(block)
    own, subject, seq, stamp = m.groups()
    headers = parse_header_lines(own.split(CRLF)) if own else None
    if headers and any(k in SERVER_HEADERS for k, _ in headers):
        return _parse_direct_reply_lines(block)  # the message carries a header the server sets
    return int(seq), wire_text(subject), rfc3339_to_ns(stamp.decode()), headers or None


def _parse_direct_reply_lines(block: bytes) -> tuple[int, str, int, Headers | None]:
    """parse_direct_reply for any block: every line read, the last value of each server
    header kept."""
    seq = b""
    subject = stamp = ""
    own: Headers = []
    for line in block.split(CRLF)[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name = name.strip()
        if name == b"Nats-Sequence":
            seq = value.strip()
        elif name == b"Nats-Subject":
            subject = wire_text(value.strip())
        elif name == b"Nats-Time-Stamp":
            stamp = value.strip().decode()
        elif name in _SERVER_HEADER_BYTES or _HEADER_NAME_BLANK.search(name):
            continue
        else:
            try:
                key = name.decode("ascii")
            except UnicodeDecodeError:
                continue
            own.append((key, wire_text(value.strip())))
    if not seq.isdigit() or not subject or not stamp:
        raise WireError(
            f"direct-get reply without Nats-Sequence/Nats-Subject/Nats-Time-Stamp: {block[:200]!r}"
        )
    return int(seq), subject, rfc3339_to_ns(stamp), own or None


def parse_ack_subject(reply: str) -> tuple[int, int, int]:
    """(stream sequence, time in ns, messages pending) from the reply subject of a message a
    JetStream consumer delivers: `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.
    <pending>`, or the form with a domain and account hash after `$JS.ACK`."""
    t = reply.split(".")
    if len(t) == 9:
        return int(t[5]), int(t[7]), int(t[8])
    if len(t) >= 11:
        return int(t[7]), int(t[9]), int(t[10])
    raise WireError(f"not a JetStream delivery reply subject: {reply!r}")


_ACK_SEQ = re.compile(rb'"seq":\s*(\d+)')


def ack_seq(ack: bytes) -> int:
    """The stream sequence a JetStream publish ack names (`{"stream":"S","seq":N}`; a duplicate's
    ack names the sequence of the message stored first); 0 when it names none."""
    m = _ACK_SEQ.search(ack)
    return int(m.group(1)) if m else 0


def check_subject(subject: str, reply: str = "") -> None:
    if not subject or _SUBJECT_INVALID.search(subject) or _SUBJECT_INVALID.search(reply):
        raise WireError(f"invalid subject {subject!r} (reply {reply!r}): no spaces or line breaks")


def pub(subject: str, reply: str, payload: bytes) -> bytes:
    """The PUB command publishing `payload`, without headers."""
    return b"PUB %s %s %d\r\n%s\r\n" % (wire_bytes(subject), reply.encode(), len(payload), payload)


def hpub(subject: str, reply: str, header_lines: bytes, payload: bytes) -> bytes:
    """The HPUB command publishing `payload` with the header block around `header_lines`."""
    hlen = len(header_lines) + HEADER_FRAME
    return b"HPUB %s %s %d %d\r\n%s\r\n%s\r\n%s\r\n" % (
        wire_bytes(subject),
        reply.encode(),
        hlen,
        hlen + len(payload),
        HEADER_LINE,
        header_lines,
        payload,
    )
