"""Credentials for the TLS and authentication tests, made fresh in each test: a private CA with
server and client certificates (trustme), nkeys, and operator-mode JWTs and creds files signed
here the way `nsc` signs them (ed25519 nkeys, JWT v2 claims)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys
import trustme

PREFIX = {
    "operator": nkeys.PREFIX_BYTE_OPERATOR,
    "account": nkeys.PREFIX_BYTE_ACCOUNT,
    "user": nkeys.PREFIX_BYTE_USER,
}


@dataclass(frozen=True)
class TLSFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here: a client trusting only it must fail


def tls_files(root: Path) -> TLSFiles:
    root.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("replicator@example.net")
    files = TLSFiles(
        *(root / n for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key", "other.pem"))
    )
    ca.cert_pem.write_to_path(str(files.ca))
    server.cert_chain_pems[0].write_to_path(str(files.server_cert))
    server.private_key_pem.write_to_path(str(files.server_key))
    client.cert_chain_pems[0].write_to_path(str(files.client_cert))
    client.private_key_pem.write_to_path(str(files.client_key))
    trustme.CA().cert_pem.write_to_path(str(files.other_ca))
    return files


@dataclass(frozen=True)
class NKey:
    seed: bytes
    public: str

    @property
    def pair(self) -> Any:
        return nkeys.from_seed(self.seed)


def new_nkey(kind: str) -> NKey:
    seed = nkeys.encode_seed(os.urandom(32), PREFIX[kind])
    return NKey(seed, nkeys.from_seed(seed).public_key.decode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def jwt(issuer: NKey, subject: str, name: str, nats: dict[str, Any], expires: int | None = None) -> str:
    claims: dict[str, Any] = {"iat": int(time.time()) - 5, "iss": issuer.public, "name": name, "sub": subject}
    if expires is not None:
        claims["exp"] = expires
    claims["nats"] = {**nats, "version": 2}
    body = json.dumps(claims, separators=(",", ":")).encode()
    claims["jti"] = base64.b32encode(hashlib.sha256(body).digest()).decode().rstrip("=")
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
    signature = issuer.pair.sign(f"{header}.{payload}".encode())
    return f"{header}.{payload}.{_b64(signature)}"


def creds(user_jwt: str, user: NKey) -> str:
    return (
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n------END USER NKEY SEED------\n"
    )


_UNLIMITED = {
    "subs": -1, "conn": -1, "leaf": -1, "imports": -1, "exports": -1, "data": -1, "payload": -1,
    "wildcards": True, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
}  # fmt: skip


@dataclass(frozen=True)
class OperatorMode:
    server_config: str  # lines for the server's configuration
    good: Path  # a creds file that works
    expired: Path  # a user whose JWT has expired
    revoked: Path  # a user the account has revoked
    user_seed: Path  # the good user's nkey seed alone (for jwt= + nkey=)
    user_jwt: Path


def operator_mode(root: Path) -> OperatorMode:
    """An operator, a system account, an application account with JetStream, and users."""
    root.mkdir(parents=True, exist_ok=True)
    op, sys_acct, app = new_nkey("operator"), new_nkey("account"), new_nkey("account")
    good, old, gone = new_nkey("user"), new_nkey("user"), new_nkey("user")
    op_jwt = jwt(op, op.public, "OP", {"type": "operator", "system_account": sys_acct.public})
    sys_jwt = jwt(op, sys_acct.public, "SYS", {"type": "account", "limits": {"conn": -1}})
    app_jwt = jwt(op, app.public, "APP", {
        "type": "account", "limits": _UNLIMITED, "revocations": {gone.public: int(time.time()) + 60},
    })  # fmt: skip
    user_claims = {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1}
    files = {}
    for label, key, exp in (
        ("good", good, None),
        ("expired", old, int(time.time()) - 60),
        ("revoked", gone, None),
    ):
        path = root / f"{label}.creds"
        path.write_text(creds(jwt(app, key.public, label, user_claims, expires=exp), key))
        path.chmod(0o600)
        files[label] = path
    (root / "operator.jwt").write_text(op_jwt)
    seed = root / "user.nk"
    seed.write_bytes(good.seed)
    user_jwt = root / "user.jwt"
    user_jwt.write_text(jwt(app, good.public, "good", user_claims))
    config = (
        f'operator: "{root / "operator.jwt"}"\n'
        f'system_account: "{sys_acct.public}"\n'
        "resolver: MEMORY\n"
        f'resolver_preload: {{ "{sys_acct.public}": "{sys_jwt}", "{app.public}": "{app_jwt}" }}\n'
    )
    return OperatorMode(config, files["good"], files["expired"], files["revoked"], seed, user_jwt)
