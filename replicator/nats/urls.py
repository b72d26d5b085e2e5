"""NATS URLs in the Choria form: `nats://user:pass@host:4222,nats://host2:4222?credentials=/path`.

Options ride in the query string: `credentials=` (a .creds file), `jwt=`+`nkey=` (two files),
`nkey=` alone (an nkey seed file), `connect_timeout=` (a duration: `2s`, `1500ms`; or seconds),
`insecure=` (TLS without verifying the server) and `tls_handshake_first=` (TLS before the
server's INFO, for TLS-terminating proxies). A user without a password is a token, as in Go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from replicator.durations import parse_duration

_KNOWN = {"credentials", "jwt", "nkey", "connect_timeout", "insecure", "tls_handshake_first"}
# Go's strconv.ParseBool spellings (Choria's), lower-cased; `yes` and `?insecure` alone have
# always been true here (Go ignores them: false).
_TRUE = ("1", "t", "true", "yes", "")
_FALSE = ("0", "f", "false", "no")
_SCHEMES = {"nats", "tls", "ws", "wss"}


@dataclass(frozen=True)
class NatsURL:
    servers: list[str]
    user: str | None = None
    password: str | None = None
    credentials: str | None = None
    jwt: str | None = None
    nkey: str | None = None
    connect_timeout: float = 5.0
    insecure: bool = False
    tls_handshake_first: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    def redacted(self) -> str:
        """The server list without secrets, for logs."""
        return ",".join(self.servers)


def parse_nats_url(url: str) -> NatsURL:
    if not url or not url.strip():
        raise ValueError("empty URL: give nats://host:4222")
    text = url.strip()
    query = ""
    if "?" in text:
        text, query = text.split("?", 1)
    servers: list[str] = []
    user = password = None
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "://" not in part:
            part = "nats://" + part
        sp = urlsplit(part)
        if sp.scheme not in _SCHEMES:
            raise ValueError(f"unsupported scheme {sp.scheme!r} in {part!r}: use nats:// or tls://")
        try:
            port = sp.port
        except ValueError:
            raise ValueError(f"bad port in {part!r}: use nats://host:4222") from None
        if not sp.hostname:
            raise ValueError(f"no host in {part!r}: use nats://host:4222")
        if any(c.isspace() for c in part):
            raise ValueError(
                f"whitespace in {part!r}: use nats://host:4222 (several: comma separated, no spaces)"
            )
        if sp.username and user is None:
            user = unquote(sp.username)
            password = unquote(sp.password) if sp.password else None
        host = f"[{sp.hostname}]" if ":" in sp.hostname else sp.hostname
        servers.append(f"{sp.scheme}://{host}:{port or 4222}")
    if not servers:
        raise ValueError(f"no servers in {url!r}: use nats://host:4222")
    params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    unknown = set(params) - _KNOWN
    if unknown:
        raise ValueError(
            f"unknown URL option {sorted(unknown)[0]!r}: supported are {', '.join(sorted(_KNOWN))}"
        )
    if params.get("jwt") and not params.get("nkey"):
        raise ValueError("jwt= needs nkey= (the user's seed file) beside it")
    timeout = 5.0
    if "connect_timeout" in params:
        try:
            text = params["connect_timeout"]
            timeout = (
                float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text).total_seconds()
            )
        except ValueError:
            raise ValueError(
                f"connect_timeout={params['connect_timeout']!r} is not a duration: use 2s, 1500ms or 5"
            ) from None
        if timeout <= 0:
            raise ValueError(f"connect_timeout={params['connect_timeout']!r}: give more than 0, e.g. 2s")
    insecure = _flag(params, "insecure")
    return NatsURL(
        servers=servers,
        user=user,
        password=password,
        credentials=params.get("credentials") or None,
        jwt=params.get("jwt") or None,
        nkey=params.get("nkey") or None,
        connect_timeout=timeout,
        insecure=insecure,
        tls_handshake_first=_flag(params, "tls_handshake_first"),
    )


def _flag(params: dict[str, str], name: str) -> bool:
    value = params.get(name, "false").lower()
    if value not in _TRUE and value not in _FALSE:
        raise ValueError(
            f"{name}={params[name]!r} is neither true nor false: give {name}=true or {name}=false"
        )
    return value in _TRUE
