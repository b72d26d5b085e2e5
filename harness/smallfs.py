"""A small filesystem of its own (tmpfs) to run out of space on, and a file that fills it.

Tests and scenarios put the replicator's state store here to see what a full disk does. Mounting
needs root (CI runs as root); elsewhere the error says so."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from types import TracebackType

CHUNK = 64 * 1024


class SmallFilesystem:
    """A tmpfs of `size_mb` MiB mounted at `path` for the life of the `with` block."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = path
        self.size_mb = size_mb

    def __enter__(self) -> SmallFilesystem:
        self.path.mkdir(parents=True, exist_ok=True)
        cmd = ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700", "tmpfs", str(self.path)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"cannot mount a {self.size_mb} MiB tmpfs at {self.path} ({done.stderr.strip()}): "
                "run as root, or with CAP_SYS_ADMIN"
            )
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        subprocess.run(["umount", "--lazy", str(self.path)], check=False)

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize


def fill(directory: Path, leave: int = 0) -> Path:
    """Write a file in `directory` until its filesystem has at most `leave` bytes free; returns it
    (delete it to make room again)."""
    path = directory / "filler"
    block = b"\0" * CHUNK
    with path.open("wb", buffering=0) as f:
        while True:
            st = os.statvfs(directory)
            room = st.f_bavail * st.f_frsize - leave
            if room <= 0:
                break
            try:
                f.write(block[: min(CHUNK, room)])
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
    return path
