"""Open the replicator's NATS connections from a Choria-style URL and TLS settings."""

from __future__ import annotations

import logging
import ssl
from typing import Any, Protocol

from replicator.nats.client import ReplicatorClient
from replicator.nats.urls import NatsURL, parse_nats_url


class TLSSettings(Protocol):
    """PEM files of a TLS connection (the config's `tls`, or the reader options' copy)."""

    @property
    def ca(self) -> str: ...
    @property
    def cert(self) -> str: ...
    @property
    def key(self) -> str: ...


log = logging.getLogger(__name__)


def ssl_context(tls: TLSSettings | None, insecure: bool) -> ssl.SSLContext | None:
    if (tls is None or not (tls.ca or tls.cert or tls.key)) and not insecure:
        return None
    ctx = ssl.create_default_context(cafile=tls.ca if tls and tls.ca else None)
    if tls and tls.cert:
        ctx.load_cert_chain(tls.cert, tls.key)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def connect_options(url: str | NatsURL, tls: TLSSettings | None = None, name: str = "") -> dict[str, Any]:
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
    url: str | NatsURL, tls: TLSSettings | None = None, name: str = "", **overrides: Any
) -> ReplicatorClient:
    """Connect with a bounded first attempt: a wrong URL fails fast with a clear error."""
    opts = connect_options(url, tls, name)
    opts.update(overrides)

    async def _error_cb(e: Exception) -> None:
        log.warning("NATS connection %s: %s", name or opts["servers"], e)

    opts.setdefault("error_cb", _error_cb)
    nc = ReplicatorClient()
    await nc.connect(**opts)
    return nc
