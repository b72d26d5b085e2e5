"""`make image`: the container image of packaging/container/Containerfile, built and tried on
this machine with buildah (Debian's package), which needs no daemon.

No container registry is reachable here, so the Debian 12 base is made with debootstrap from
Debian's packages (the Containerfile's BASE build argument), and pip inside the build reaches
PyPI through this machine's CA bundle when it has one (its PIP_CERT argument). The smoke test
runs the image against two local nats-servers: a real copy, its health check, a clean stop."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats
import yaml

from harness.dist import ROOT
from harness.localnats import free_port, local_cluster
from harness.process import process_tree
from harness.streams import copied_sequences, count_messages

BASE_IMAGE = "localhost/debian:bookworm-minbase"
IMAGE = "localhost/stream-replicator:latest"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
ENV = dict(os.environ, STORAGE_DRIVER="vfs")  # no overlay mounts needed


def _buildah(*args: str, check: bool = True, capture: bool = False) -> str:
    done = subprocess.run(["buildah", *args], env=ENV, check=check, capture_output=capture, text=True)
    return done.stdout.strip() if capture else ""


def _have_image(name: str) -> bool:
    return subprocess.run(["buildah", "inspect", name], env=ENV, capture_output=True).returncode == 0


def build_base() -> None:
    if _have_image(BASE_IMAGE):
        return
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = Path(tmp) / "rootfs"
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), "http://deb.debian.org/debian"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        ctr = _buildah("from", "scratch", capture=True)
        mnt = _buildah("mount", ctr, capture=True)
        subprocess.run(["cp", "-a", f"{rootfs}/.", mnt], check=True)
        _buildah("umount", ctr)
        _buildah("commit", "-q", ctr, BASE_IMAGE)
        _buildah("rm", ctr)


def build() -> None:
    for tool in ("buildah", "debootstrap"):
        if shutil.which(tool) is None:
            sys.exit(f"image: {tool} is missing: apt-get install buildah debootstrap")
    if not list((ROOT / "dist").glob("stream_replicator-*-py3-none-any.whl")):
        sys.exit("image: no wheel in dist/: run make dist first")
    build_base()
    ca = ["--volume", f"{HOST_CA}:/ca.crt:ro", "--build-arg", "PIP_CERT=/ca.crt"] if HOST_CA.exists() else []
    subprocess.run(
        ["buildah", "bud", "--isolation", "chroot", "--format", "docker", "--build-arg", f"BASE={BASE_IMAGE}",
         *ca, "-f", str(ROOT / "packaging/container/Containerfile"), "-t", IMAGE, str(ROOT)],
        env=ENV, check=True, cwd=ROOT,
    )  # fmt: skip


async def _backlog(url: str, n: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for i in range(n):
            await js.publish(
                f"orders.{i % 7}", json.dumps({"sender": f"node{i % 100}", "i": i}).encode() * 20
            )
    finally:
        await nc.close()


def _descendant_running(root: int, needle: bytes) -> int:
    """The pid of a descendant of `root` whose command line starts with `needle`."""
    for pid, cmd in process_tree(root).items():
        if pid != root and cmd.startswith(needle):
            return pid
    raise RuntimeError(f"no process running {needle!r} under {root}")


def smoke(n: int = 2_000) -> None:
    """The image copies n messages between two local servers, answers its health check, and
    stops cleanly on SIGTERM; the copy is the source, in order."""
    with (
        local_cluster(1, "img-src") as src,
        local_cluster(1, "img-dst") as dst,
        tempfile.TemporaryDirectory() as tmp,
    ):
        asyncio.run(_backlog(src.url, n))
        port = free_port()
        cfg = Path(tmp) / "sr.yaml"
        cfg.write_text(yaml.safe_dump({
            "name": "img", "monitor_port": port, "state_store": "/var/lib/stream-replicator",
            "streams": [{"stream": "ORDERS", "source_url": src.url, "target_url": dst.url}],
        }))  # fmt: skip
        os.chmod(tmp, 0o755)
        cfg.chmod(0o644)
        ctr = _buildah("from", IMAGE, capture=True)
        # buildah's chroot isolation keeps this host's hostname, which the image's /etc/hosts
        # does not name (a container runtime adds it): the JVM could not resolve itself.
        _buildah("config", "--env", "SPARK_LOCAL_HOSTNAME=localhost", ctr)
        mount = ["--volume", f"{cfg}:/etc/stream-replicator/sr.yaml:ro"]
        try:
            started = time.monotonic()
            # The image's own entry point (chroot isolation shares this host's loopback).
            proc = subprocess.Popen(["buildah", "run", "--isolation", "chroot", *mount, ctr, "--",
                                     "stream-replicator", "run", "--config", "/etc/stream-replicator/sr.yaml"],
                                    env=ENV, start_new_session=True)  # fmt: skip
            deadline = time.monotonic() + 180
            while asyncio.run(count_messages(dst.url, "ORDERS")) < n:
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit(f"image smoke: the copy did not finish (exit {proc.poll()})")
                time.sleep(0.5)
            print(f"image smoke: {n:,} copied, {time.monotonic() - started:.1f} s after start")
            health = subprocess.run(["buildah", "run", "--isolation", "chroot", *mount, ctr, "--",
                                     "stream-replicator", "health", "--config", "/etc/stream-replicator/sr.yaml"],
                                    env=ENV, capture_output=True, text=True)  # fmt: skip
            print(f"image smoke: health check exit {health.returncode}: {health.stdout.strip()}")
            # As a container runtime's stop does: SIGTERM to the entry point's process.
            # (buildah's own helper processes above it carry the same arguments.)
            entry = b"/opt/stream-replicator/bin/python3\0/opt/stream-replicator/bin/stream-replicator\0run"
            os.kill(_descendant_running(proc.pid, entry), signal.SIGTERM)
            code = proc.wait(60)
            print(f"image smoke: stopped with SIGTERM, exit {code}")
        finally:
            _buildah("rm", ctr, check=False)
        exact = asyncio.run(copied_sequences(dst.url, "ORDERS")) == list(range(1, n + 1))
        print(f"image smoke: copy is the source, in order: {exact}")
        if not (exact and health.returncode == 0 and code == 0):
            sys.exit(1)


def main() -> None:
    build()
    smoke()


if __name__ == "__main__":
    main()
