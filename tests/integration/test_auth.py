"""TLS and authentication against real nats-servers configured for them: every way the config
offers to connect works, every way it can be wrong is one line naming the server and the fix,
and no secret reaches a log line, a metric or `validate`'s output."""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from auth_material import OperatorMode, TLSFiles, new_nkey, operator_mode, tls_files
from helpers import SLOW_S, cli, registration, run, start_replicator, wait_for, write_config
from nats_servers import NatsCluster, nats_cluster

from harness.streams import copy_differences
from replicator.nats.client import ReplicatorClient
from replicator.nats.connect import ConnectError, open_connection
from replicator.nats.tls import TLSFiles as ClientTLS

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-Pa55"
TOKEN = "t0ken-XYZ"


@dataclass
class Secured:
    tls: TLSFiles
    op: OperatorMode
    nkey_seed: Path
    operator_server: NatsCluster  # operator mode (creds, JWTs), mutual TLS
    password_server: NatsCluster  # user/password and an nkey user, TLS before INFO
    token_server: NatsCluster  # a token, server-verified TLS

    def port(self, server: NatsCluster) -> int:
        return server.servers[0].port


def _client_ctx(t: TLSFiles, cert: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(t.ca))
    if cert:
        ctx.load_cert_chain(str(t.client_cert), str(t.client_key))
    return ctx


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("auth")
    t = tls_files(root / "tls")
    op = operator_mode(root / "op")
    user = new_nkey("user")
    seed = root / "nkey.seed"
    seed.write_bytes(user.seed)
    tls = f'cert_file: "{t.server_cert}", key_file: "{t.server_key}", timeout: 2'
    mutual = f'tls {{ {tls}, ca_file: "{t.ca}", verify: true }}'
    with (
        nats_cluster(1, "opmode", op.server_config + mutual,
                     connect={"user_credentials": str(op.good), "tls": _client_ctx(t)}) as operator_server,
        nats_cluster(1, "passwords",
                     f"tls {{ {tls}, handshake_first: true }}\n"
                     f'authorization {{ users: [{{user: repl, password: "{PASSWORD}"}}, {{nkey: {user.public}}}] }}',
                     connect={"user": "repl", "password": PASSWORD, "tls": _client_ctx(t, cert=False),
                              "tls_handshake_first": True}) as password_server,
        nats_cluster(1, "token", f'tls {{ {tls} }}\nauthorization {{ token: "{TOKEN}" }}',
                     connect={"token": TOKEN, "tls": _client_ctx(t, cert=False)}) as token_server,
    ):  # fmt: skip
        yield Secured(t, op, seed, operator_server, password_server, token_server)


def _connect(url: str, tls: ClientTLS | None) -> str:
    """'ok' once JetStream answers on a connection made as the replicator makes them, or the
    one-line error."""

    async def go() -> str:
        try:
            nc = await asyncio.wait_for(open_connection(url, tls, name="auth-test"), 30)
        except ConnectError as e:
            return str(e)
        try:
            await nc.jetstream().account_info()
            return "ok"
        finally:
            await nc.close()

    return asyncio.run(go())


def test_every_way_to_connect_and_every_refusal(secured: Secured) -> None:
    t, op = secured.tls, secured.op
    mtls = ClientTLS(ca=str(t.ca), cert=str(t.client_cert), key=str(t.client_key))
    ca_only = ClientTLS(ca=str(t.ca))
    opm = f"nats://127.0.0.1:{secured.port(secured.operator_server)}"
    pw = f"127.0.0.1:{secured.port(secured.password_server)}"
    tok = f"127.0.0.1:{secured.port(secured.token_server)}"

    assert _connect(f"{opm}?credentials={op.good}", mtls) == "ok"
    assert _connect(f"{opm}?jwt={op.user_jwt}&nkey={op.user_seed}", mtls) == "ok"
    insecure = ClientTLS(cert=str(t.client_cert), key=str(t.client_key))  # no CA: not verified
    assert _connect(f"{opm}?credentials={op.good}&insecure=true", insecure) == "ok"
    assert _connect(f"nats://repl:{PASSWORD}@{pw}?tls_handshake_first=true", ca_only) == "ok"
    assert _connect(f"nats://{pw}?nkey={secured.nkey_seed}&tls_handshake_first=true", ca_only) == "ok"
    assert _connect(f"nats://{TOKEN}@{tok}", ca_only) == "ok"

    refused = {
        "expired creds": _connect(f"{opm}?credentials={op.expired}", mtls),
        "revoked creds": _connect(f"{opm}?credentials={op.revoked}", mtls),
        "wrong password": _connect(f"nats://repl:wrong-{PASSWORD}@{pw}?tls_handshake_first=true", ca_only),
        "wrong token": _connect(f"nats://not-{TOKEN}@{tok}", ca_only),
    }
    for what, line in refused.items():
        assert line.startswith("cannot connect to nats://127.0.0.1:"), what
        assert "Authorization Violation" in line and "check the user and password" in line, (what, line)
    assert "(auth-test)" in refused["wrong password"]
    no_cert = _connect(f"{opm}?credentials={op.good}", ca_only)
    assert "requires a client certificate: give tls: cert and key" in no_cert
    unknown_ca = _connect(f"{opm}?credentials={op.good}", ClientTLS(ca=str(t.other_ca), cert=str(t.client_cert),
                                                                     key=str(t.client_key)))  # fmt: skip
    assert "not signed by a CA this client trusts" in unknown_ca
    plain_client = _connect(f"{opm}?credentials={op.good}", None)  # the server has TLS, the client no CA
    assert "not signed by a CA this client trusts" in plain_client
    for line in [*refused.values(), no_cert, unknown_ca, plain_client]:
        assert "\n" not in line
        assert PASSWORD not in line and TOKEN not in line


def test_a_copy_over_tls_and_credentials_shows_no_secret(secured: Secured, tmp_path: Path) -> None:
    t, op = secured.tls, secured.op
    src = f"nats://127.0.0.1:{secured.port(secured.operator_server)}?credentials={op.good}"
    dst = f"nats://repl:{PASSWORD}@127.0.0.1:{secured.port(secured.password_server)}?tls_handshake_first=true"
    src_tls = {"ca": str(t.ca), "cert": str(t.client_cert), "key": str(t.client_key)}
    run(create_stream_tls(src, src_tls, "SECURE"))
    run(publish_tls(src, src_tls, 2000))
    stream = {"stream": "SECURE", "source_url": src, "target_url": dst, "source_tls": src_tls,
              "target_tls": {"ca": str(t.ca)}}  # fmt: skip
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [stream])
    validated = cli("validate", "--config", str(cfg))
    assert validated.returncode == 0, validated.stderr
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count_tls(dst, {"ca": str(t.ca)}, "SECURE")) >= 2000, SLOW_S, "the copy", rep)
        port = yaml.safe_load(cfg.read_text())["monitor_port"]
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        assert rep.stop() == 0, rep.output()
    assert run(differences_tls(src, src_tls, dst, {"ca": str(t.ca)})) == []
    seed_text = Path(op.good).read_text().split("SEED-----\n")[1].split("\n")[0]
    for where, text in (
        ("log", rep.output(10**9)),
        ("metrics", metrics),
        ("validate", validated.stdout + validated.stderr),
    ):
        for secret in (PASSWORD, seed_text):
            assert secret not in text, f"a secret in the {where}"

    wrong = write_config(
        tmp_path / "wrong.yaml", "dc1", [{**stream, "target_url": dst.replace(PASSWORD, "nope")}]
    )
    bad = start_replicator(wrong)
    wait_for(lambda: not bad.alive(), SLOW_S, "the replicator to give up")
    out = bad.output()
    assert bad.proc is not None and bad.proc.returncode == 2, out
    assert "Authorization Violation" in out and "check the user and password" in out
    assert "Traceback" not in out and "nope" not in out


async def _nc(url: str, tls: dict[str, str]) -> ReplicatorClient:
    return await open_connection(url, ClientTLS(**tls), name="auth-test")


async def create_stream_tls(url: str, tls: dict[str, str], name: str) -> None:
    from nats.js.api import StreamConfig

    nc = await _nc(url, tls)
    try:
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=["secure.>"], allow_direct=True))
    finally:
        await nc.close()


async def publish_tls(url: str, tls: dict[str, str], n: int) -> None:
    nc = await _nc(url, tls)
    try:
        js = nc.jetstream(publish_async_max_pending=1000)
        futs = [await js.publish_async(f"secure.{i % 7}", registration(i, 600)) for i in range(n)]
        await asyncio.gather(*futs)
    finally:
        await nc.close()


async def count_tls(url: str, tls: dict[str, str], stream: str) -> int:
    nc = await _nc(url, tls)
    try:
        from replicator.nats.jetstream import stream_info

        info = await stream_info(nc, stream)
        return 0 if info is None else int(info.state.messages)
    finally:
        await nc.close()


async def differences_tls(src: str, src_tls: dict[str, str], dst: str, dst_tls: dict[str, str]) -> list[str]:
    return await copy_differences(src, "SECURE", dst, "SECURE", src_tls=ClientTLS(**src_tls),
                                  dst_tls=ClientTLS(**dst_tls))  # fmt: skip
