"""The replicator as its users run it: the real CLI in a process of its own, started and waited
for through its monitoring endpoint (`/readyz`), stopped by SIGTERM or killed with its whole
process group (the JVM and Spark's Python workers included)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml


def process_tree(root: int) -> dict[int, bytes]:
    """Pid -> raw command line (NUL-separated) of `root` and its descendants, parents first
    (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    commands: dict[int, bytes] = {}
    todo = [root]
    while todo:
        pid = todo.pop(0)
        todo.extend(children.get(pid, []))
        try:
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
    return commands


def monitor_port_of(config: Path) -> int:
    port = int((yaml.safe_load(config.read_text()) or {}).get("monitor_port") or 0)
    if not port:
        raise ValueError(f"{config}: set monitor_port, the harness waits on its /readyz")
    return port


def readiness(port: int | str, timeout: float = 2.0) -> dict[str, object] | None:
    """The replicator's /readyz document, None while it does not answer. `port`: on this
    machine's loopback address, or the URL of the replicator's /metrics or /readyz."""
    url = f"http://127.0.0.1:{port}/readyz" if isinstance(port, int) else port.replace("/metrics", "/readyz")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return dict(json.loads(r.read()))
    except urllib.error.HTTPError as e:  # 503: not ready yet, the body says why
        return dict(json.loads(e.read()))
    except (OSError, ValueError):
        return None


def entry_state(port: int | str, key: str) -> str | None:
    """A stream entry's state on a replicator's /readyz (`replicating`, `standby`, ...; key
    `<stream>/<name>`), None while it does not answer or has no such entry."""
    streams = (readiness(port, timeout=1.0) or {}).get("streams")
    return str(streams.get(key)) if isinstance(streams, dict) and key in streams else None


class ReplicatorProcess:
    """`stream-replicator run --config CONFIG` with its output appended to `log_path`.
    `command` replaces `python -m replicator.cli run` (an installed script, spark-submit)."""

    def __init__(
        self,
        config: Path,
        log_path: Path,
        *args: str,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
        cwd: Path | None = None,
        monitor_host: str = "127.0.0.1",
    ) -> None:
        self.config, self.log_path, self.args, self.env = config, log_path, args, env
        self.monitor_host = monitor_host
        self.command = command or [sys.executable, "-m", "replicator.cli", "run"]
        self.cwd = cwd
        self.port = monitor_port_of(config)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://{self.monitor_host}:{self.port}/metrics"

    def output(self, tail: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""

    def start(self, wait: bool = True, timeout: float = 300) -> ReplicatorProcess:
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [*self.command, "--config", str(self.config), *self.args],
                stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                start_new_session=True,  # kill -9 of the group takes the JVM and workers with it
            )  # fmt: skip
        if wait:
            self.wait_ready(timeout)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 300) -> None:
        """Until every configured stream replicates (/readyz answers 200)."""
        deadline = time.monotonic() + timeout
        while True:
            doc = readiness(self.metrics_url)
            if doc is not None and doc.get("ready"):
                return
            if not self.alive():
                code = self.proc.returncode if self.proc else None
                raise RuntimeError(f"replicator exited ({code}) before it was ready:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"replicator not ready within {timeout:.0f}s (/readyz: {doc}); see {self.log_path}"
                )
            time.sleep(0.25)

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM, then SIGKILL of the whole group if it does not end in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode

    def stall(self, seconds: float) -> None:
        """Freeze the whole group (SIGSTOP) for `seconds`, then let it go on (SIGCONT): a GC
        pause, a frozen VM or a slow disk, as the rest of the world sees it."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def kill9(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
