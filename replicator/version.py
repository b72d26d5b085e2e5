"""What `stream-replicator --version` reports: this project and what it runs on."""

from __future__ import annotations

import re
import subprocess
from importlib import metadata

from replicator import __version__
from replicator.spark.jvm import java_binary


def _package(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def java_version() -> str:
    java = java_binary()
    if java is None:
        return "not found (set JAVA_HOME or put java 17+ on PATH)"
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=20).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{java}: {e}"
    m = re.search(r'version "([^"]+)"', out)
    return f"{m.group(1) if m else out.strip().splitlines()[0]} ({java})"


def version_lines() -> list[str]:
    return [
        f"stream-replicator {__version__}",
        f"pyspark {_package('pyspark')}",
        f"nats-py {_package('nats-py')}",
        f"java {java_version()}",
    ]
