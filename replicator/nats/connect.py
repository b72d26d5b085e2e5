"""Open nats-py connections from a Choria-style URL and TLS settings."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterable
from typing import Any

from nats import errors
from nats.aio.client import _HEADER_KEY_RE, _HEADER_VALUE_NEWLINES, _SUBJECT_INVALID_RE, Client
from nats.aio.subscription import Subscription

from replicator.config import TLSConfig
from replicator.nats.direct_reply import HEADER_NAME_BLANK
from replicator.nats.urls import NatsURL, parse_nats_url

log = logging.getLogger(__name__)


def encode_headers(headers: Iterable[tuple[str, str]]) -> bytes:
    """The `Name: value` lines of a header block, encoded by nats-py's rules (blank names
    skipped, names checked, values stripped and their line breaks made spaces)."""
    out = bytearray()
    for k, v in headers:
        key = k.strip()
        if not key:
            continue
        if not _HEADER_KEY_RE.fullmatch(key):
            raise errors.BadHeaderError(key)
        out += b"%s: %s\r\n" % (key.encode(), v.strip().translate(_HEADER_VALUE_NEWLINES).encode())
    return bytes(out)


# Called with (subject, data, raw header block or None) of each message of a raw subscription.
RawHandler = Callable[[bytes, bytes, bytes | None], None]


class FastHeaderClient(Client):
    """nats-py's client with a faster header-line parser and raw subscriptions.

    nats-py 2.16 checks every character of every header name in a Python generator, which
    was over half the cost of reading a stream when profiled. This parser gives the same
    result (tests/unit/test_pure.py compares them) with one regex per name.

    A raw subscription (`raw_subscribe`) hands each message's wire bytes to a plain function,
    skipping the header dict, `Msg`, queue and callback task nats-py makes per message. It is
    still an ordinary nats-py subscription, so it is restored on reconnect.
    """

    def __init__(self) -> None:
        super().__init__()
        self._raw_handlers: dict[int, RawHandler] = {}

    async def raw_subscribe(self, subject: str, handler: RawHandler) -> Subscription:
        sub = await self.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
        self._raw_handlers[sub._id] = handler
        return sub

    async def raw_unsubscribe(self, sub: Subscription) -> None:
        self._raw_handlers.pop(sub._id, None)
        await sub.unsubscribe()

    async def publish_encoded(self, subject: str, reply: str, header_lines: bytes, payload: bytes) -> None:
        """`publish` with the header lines already encoded (`encode_headers`, or trusted bytes
        of that form): the sink publishes thousands of messages whose headers differ only in
        two values, and nats-py's per-message header encoding was ~16 % of its time."""
        if not subject or _SUBJECT_INVALID_RE.search(subject) or _SUBJECT_INVALID_RE.search(reply):
            raise errors.BadSubjectError
        if self.is_closed:
            raise errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        size = len(payload)
        if not self.is_connected and (
            self._max_pending_size <= 0 or size + self._pending_data_size > self._max_pending_size
        ):
            raise errors.OutboundBufferLimitError
        if size > self._max_payload:
            raise errors.MaxPayloadError
        hlen = len(header_lines) + 12  # "NATS/1.0\r\n" ... "\r\n"
        cmd = b"HPUB %s %s %d %d\r\nNATS/1.0\r\n%s\r\n%s\r\n" % (
            subject.encode(),
            reply.encode(),
            hlen,
            hlen + size,
            header_lines,
            payload,
        )
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += size
        await self._send_command(cmd)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        handler = self._raw_handlers.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]  # its parser passes None too
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        handler(subject, data, headers)

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in raw.split(b"\r\n"):
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            name = name.strip()
            if HEADER_NAME_BLANK.search(name):
                continue
            try:
                key = name.decode("ascii")
            except UnicodeDecodeError:
                continue
            out[key] = value.strip().decode("utf-8", "replace")
        return out


def ssl_context(tls: TLSConfig | None, insecure: bool) -> ssl.SSLContext | None:
    if (tls is None or not tls.enabled) and not insecure:
        return None
    ctx = ssl.create_default_context(cafile=tls.ca if tls and tls.ca else None)
    if tls and tls.cert:
        ctx.load_cert_chain(tls.cert, tls.key)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def connect_options(url: str | NatsURL, tls: TLSConfig | None = None, name: str = "") -> dict[str, Any]:
    u = parse_nats_url(url) if isinstance(url, str) else url
    opts: dict[str, Any] = {
        "servers": u.servers,
        "connect_timeout": u.connect_timeout,
        "name": name or "stream-replicator",
        # Large batches of pipelined publishes: give the flusher room.
        "pending_size": 64 * 1024 * 1024,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 1,
    }
    if u.user:
        opts["user"] = u.user
        if u.password is not None:
            opts["password"] = u.password
    if u.credentials:
        opts["user_credentials"] = u.credentials
    elif u.jwt and u.nkey:
        opts["user_credentials"] = (u.jwt, u.nkey)
    ctx = ssl_context(tls, u.insecure)
    if ctx is not None:
        opts["tls"] = ctx
    return opts


async def open_connection(
    url: str | NatsURL, tls: TLSConfig | None = None, name: str = "", **overrides: Any
) -> FastHeaderClient:
    """Connect with a bounded first attempt: a wrong URL fails fast with a clear error."""
    opts = connect_options(url, tls, name)
    opts.update(overrides)

    async def _error_cb(e: Exception) -> None:
        log.warning("NATS connection %s: %s", name or opts["servers"], e)

    opts.setdefault("error_cb", _error_cb)
    nc = FastHeaderClient()
    await nc.connect(**opts)
    return nc
