"""Open the replicator's NATS connections from a Choria-style URL and TLS settings."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from replicator.nats.client import PERMISSION_DENIED, ReplicatorClient
from replicator.nats.tls import TLSFiles
from replicator.nats.urls import NatsURL, parse_nats_url

log = logging.getLogger(__name__)

ERROR_LOG_INTERVAL_S = 30.0
# How often a connection attempt being abandoned is cancelled again until it ends (_abandon).
ABANDON_RECHECK_S = 0.05
ABANDON_CLOSE_S = 5.0  # and how long its close may take (nats-py's own waits are bounded)


class RepeatLimit:
    """Whether a line may be logged again: each text at most once per `interval_s` (a
    connection's error while a server is away comes every second; a refused subject once per
    request)."""

    def __init__(self, interval_s: float = ERROR_LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}

    def allows(self, text: str) -> bool:
        now = self.clock()
        last = self._last.get(text)
        if last is not None and now - last < self.interval_s:
            return False
        self._last[text] = now
        return True


def ssl_context(tls: TLSFiles | None, insecure: bool) -> ssl.SSLContext | None:
    if (tls is None or not tls.enabled) and not insecure:
        return None
    ctx = ssl.create_default_context(cafile=tls.ca if tls and tls.ca else None)
    if tls and tls.cert:
        ctx.load_cert_chain(tls.cert, tls.key)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def connect_options(url: str | NatsURL, tls: TLSFiles | None = None, name: str = "") -> dict[str, Any]:
    u = parse_nats_url(url) if isinstance(url, str) else url
    opts: dict[str, Any] = {
        "servers": u.servers,
        "connect_timeout": u.connect_timeout,
        "name": name or "stream-replicator",
        # Large batches of pipelined publishes: give the flusher room.
        "pending_size": 64 * 1024 * 1024,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 1,
        # A half-open link (the peer gone without closing) is noticed when pings go unanswered:
        # within ~20 s, not nats-py's default 4 minutes.
        "ping_interval": 5,
        "max_outstanding_pings": 3,
    }
    if u.user and u.password is not None:
        opts["user"] = u.user
        opts["password"] = u.password
    elif u.user:
        opts["token"] = u.user  # nats://TOKEN@host, as Go's client reads it
    if u.credentials:
        opts["user_credentials"] = u.credentials
    elif u.jwt and u.nkey:
        opts["user_credentials"] = (u.jwt, u.nkey)
    elif u.nkey:
        opts["nkeys_seed"] = u.nkey
    ctx = ssl_context(tls, u.insecure)
    if ctx is not None:
        opts["tls"] = ctx
        opts["tls_handshake_first"] = u.tls_handshake_first
    elif u.tls_handshake_first:
        raise ValueError("tls_handshake_first=true needs TLS: give tls: (ca/cert/key) or use tls://")
    return opts


class ConnectError(RuntimeError):
    """A server refused the connection for a reason retrying cannot fix (credentials, TLS)."""


# Errors that retrying will not cure, with what to do about them.
_PERMANENT = (
    ("Authorization Violation", "the server refused the credentials: check the user and password, "
     "token, nkey or creds file of the URL (an expired or revoked credential is refused this way too)"),
    ("Authentication Expired", "the credential has expired: issue a new one"),
    ("Authentication Revoked", "the credential was revoked: issue a new one"),
    ("CERTIFICATE_VERIFY_FAILED", "the server's certificate is not signed by a CA this client trusts: "
     "give the CA that signed it as tls: ca (or turn TLS off where the server has none)"),
    ("CERTIFICATE_REQUIRED", "the server requires a client certificate: give tls: cert and key"),
    ("certificate required", "the server requires a client certificate: give tls: cert and key"),
    ("WRONG_VERSION_NUMBER", "TLS on one side only: give tls: settings only for servers with TLS"),
    ("secure connection not available", "TLS on one side only: the server has no TLS; remove tls: for it"),
    ("tls_handshake_first", "the server does not do TLS before INFO: remove tls_handshake_first"),
)  # fmt: skip


# A request or subscription the user's permissions refuse: nats-py reports it through the error
# callback (the request itself gets no answer), with the server's line in lower case.
PERMISSION_HINT = (
    "allow that subject for this connection's user, spelled as docs/operations.md "
    '("NATS permissions") lists it: the client shows it in lower case'
)


def error_line(e: BaseException) -> str:
    """The text a connection's asynchronous error is logged with: a refusal by permissions
    says what to change, since the request it refused gets no answer."""
    text = str(e) or type(e).__name__
    return f"{text}: {PERMISSION_HINT}" if text.startswith(PERMISSION_DENIED) else text


def permanent_reason(e: BaseException) -> str | None:
    """What to do about a connection error that retrying will not cure; None for others."""
    text = str(e)
    for marker, hint in _PERMANENT:
        if marker.lower() in text.lower():
            return hint
    return None


async def open_connection(
    url: str | NatsURL, tls: TLSFiles | None = None, name: str = "", **overrides: Any
) -> ReplicatorClient:
    """Connect, retrying while the servers cannot be reached (nats-py's way); a refusal that
    retrying cannot cure (credentials, TLS) raises ConnectError at once, in one line that names
    the servers and the fix. Later losses of the connection are retried for ever."""
    opts = connect_options(url, tls, name)
    opts.update(overrides)
    where = f"{','.join(opts['servers'])} ({name or 'stream-replicator'})"
    loop = asyncio.get_running_loop()
    refused: asyncio.Future[BaseException] = loop.create_future()
    repeats = RepeatLimit()

    async def _error_cb(e: Exception) -> None:
        if not refused.done() and not nc.is_connected and permanent_reason(e):
            refused.set_result(e)
            return
        if nc.refusal_reported_by_subscriber(e):
            log.debug("NATS connection %s: %s (its subscriber reports it)", name or opts["servers"], e)
            return
        # While a server is away the client retries every second: the same error is logged
        # once per ERROR_LOG_INTERVAL_S, not sixty times a minute.
        text = error_line(e)
        if repeats.allows(text):
            log.warning("NATS connection %s: %s", name or opts["servers"], text)

    opts.setdefault("error_cb", _error_cb)
    nc = ReplicatorClient()

    async def _disconnected_cb() -> None:
        nc.disconnects += 1

    opts.setdefault("disconnected_cb", _disconnected_cb)
    connecting = asyncio.ensure_future(nc.connect(**opts))
    waiters: set[asyncio.Future[Any]] = {connecting, refused}
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # The caller gave up waiting: no client may connect after it (an orphan).
        await _abandon(nc, connecting)
        raise
    if not connecting.done():
        await _abandon(nc, connecting)
        e = refused.result()
        raise ConnectError(f"cannot connect to {where}: {e}: {permanent_reason(e)}")
    connecting.result()
    return nc


async def _abandon(nc: ReplicatorClient, connecting: asyncio.Future[Any]) -> None:
    # One cancel is not always enough: Python 3.11's asyncio.wait_for, around each connection
    # attempt in nats-py, drops a cancel that lands as the attempt ends (refused at once, say),
    # and the client then tries the next server for ever. So it is cancelled until it ends.
    # A cancel of this wait (a second stop) must not cut it short either: raised once it ends.
    interrupted = False
    while not connecting.done():
        connecting.cancel()
        try:
            await asyncio.wait({connecting}, timeout=ABANDON_RECHECK_S)
        except asyncio.CancelledError:
            interrupted = True
    with contextlib.suppress(BaseException):
        await connecting
    # The close too (a client that connected as it was cancelled holds a socket and tasks).
    closing = asyncio.ensure_future(nc.close())
    while not closing.done():
        try:
            await asyncio.wait({closing}, timeout=ABANDON_CLOSE_S)
        except asyncio.CancelledError:
            interrupted = True
            continue
        break
    if closing.done() and not closing.cancelled():
        closing.exception()  # retrieved: a close that failed is of no more use here
    if interrupted:
        raise asyncio.CancelledError
