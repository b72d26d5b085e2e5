"""Test helpers: fill and read streams on real servers, run the real CLI as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import yaml
from nats.js.api import StreamConfig


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def create_stream(url: str, name: str, subjects: list[str], **kw: Any) -> None:
    nc = await nats.connect(url.split(","))
    try:
        kw.setdefault("allow_direct", True)
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=subjects, **kw))
    finally:
        await nc.close()


async def publish(
    url: str, items: list[tuple[str, bytes, dict[str, str] | None]], stream: str | None = None
) -> list[int]:
    """JetStream-publish (subject, data, headers) items; returns their sequences."""
    nc = await nats.connect(url.split(","))
    try:
        js = nc.jetstream(publish_async_max_pending=2000)
        futs = [await js.publish_async(s, d, headers=h) for s, d, h in items]
        acks = await asyncio.gather(*futs)
        return [a.seq for a in acks]
    finally:
        await nc.close()


def wait_for(pred: Callable[[], bool], timeout: float, what: str, proc: Replicator | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc is not None and proc.proc.poll() is not None:
            raise AssertionError(
                f"replicator exited ({proc.proc.returncode}) before {what}:\n{proc.output()}"
            )
        time.sleep(0.25)
    detail = f"\n{proc.output()}" if proc is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")


def write_config(path: Path, name: str, streams: list[dict[str, Any]], **top: Any) -> Path:
    cfg = {"name": name, "state_store": str(path.parent / "state"), "streams": streams, **top}
    path.write_text(yaml.safe_dump(cfg))
    return path


@dataclass
class Replicator:
    proc: subprocess.Popen[bytes]
    log_path: Path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout)
        return self.proc.returncode

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def start_replicator(config: Path, *args: str) -> Replicator:
    log_path = config.parent / f"replicator-{time.time_ns()}.log"
    out = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "replicator.cli", "run", "--config", str(config), *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # kill -9 takes the JVM and Python workers with it
    )
    return Replicator(proc, log_path)


def tree_commands(root: int) -> list[str]:
    """Command lines of `root` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(d.name))
    commands, todo = [], [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            commands.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return commands


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replicator.cli", *args], capture_output=True, text=True, timeout=60
    )


def registration(i: int, size: int = 1000) -> bytes:
    body = {"sender": f"node{i % 100}.example.net", "i": i}
    pad = max(0, size - len(json.dumps(body)) - 10)
    body["pad"] = "x" * pad
    return json.dumps(body).encode()
