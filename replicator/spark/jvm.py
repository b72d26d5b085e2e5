"""JVM options for the Spark driver, and its class-data-sharing archive.

Measured with `make bench` on 2 cores: the JIT's C2 compiler threads took more CPU than the
copy itself during the first minutes (4.1 of 7.3 CPU-s for 100,000 messages), so the driver
runs C1 only (`-XX:TieredStopAtLevel=1`), a copy-only one with the serial collector. Loading
Spark's ~20,000 classes costs seconds at every start; a dynamic CDS archive of them
(`stream-replicator jvm-archive`, run by `make install`) cut session start from ~9 s to ~6 s
and the first job from ~2.7 s to ~1.4 s.

An archive is tied to one JVM and one classpath (the venv's pyspark jars), so its file name
carries a hash of both. A truncated archive crashes the JVM, so the JVM writes to a partial
file and only a dump whose JVM exited cleanly is renamed into place.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

# C1 only shrinks the JVM's default code cache from 240 MB to 48 MB, which a sampled query's
# code (~47 MB under load) nearly fills: the JVM sweeps hard from 90 % full, and when it fills
# it flushes most of it and compiles it again, or stops compiling for a while ("CodeCache is
# full. Compiler has been disabled"). 240 MB is the size of the JVM's tiered default (one pool
# here, not three segments); pages are touched only as code is compiled, so a copy-only JVM
# (~16-18 MB of code) is no larger for it. docs/performance.md, 2026-12-07 (tenth session).
# Every driver JVM runs C1 only, so the two go together.
C1_ONLY = ["-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m"]
# For copy-only jobs, where the JVM's own work is light (1.1 of its 7.3 CPU-s) and C2's
# compiling was the cost: C1 only, and the serial collector.
LIGHT_JVM_OPTIONS = [*C1_ONLY, "-XX:+UseSerialGC"]
# For jobs with a sampled stream, which shuffle and keep state: C1 only too, with the JVM's
# default collector. C2 was still compiling Spark's per-batch code minutes in, a third of the
# replicator's CPU while every sender is new (at a start, a failover, a catch-up); C1's code
# costs the JVM's own work up to 1.1x, which a fleet's real rate (100,000 nodes: 333 msg/s) hardly
# feels. `bench.sampling_bench` and steady-100k side by side: docs/performance.md, 2026-12-02.
SAMPLING_JVM_OPTIONS = list(C1_ONLY)
# When no batch's rows pass through the JVM (the driver reads every copy batch itself): the heap
# starts at 32 MB and grows as it fills, rather than at 1/64 of the machine's memory (384 MB
# here), most of which the collector touched before its first collection. `bench.memory_probe`:
# the JVM's peak RSS 340 MB instead of 429 (docs/performance.md). Its young generation stays at
# 16 MB (the JVM's peak 320 MB instead of 337; a live copy's batches took no longer, `make bench`
# latency side by side). Batches read by Spark's tasks (lanes, `driver_reads: small`, a
# cluster) keep the default heap; in such a process only a batch its driver could not read does.
SMALL_FIRST_HEAP = ["-Xms32m", "-Xmn16m"]
# The JVM warns about every class it cannot archive (signed jars): keep stderr readable.
QUIET_CDS = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def cache_dir() -> Path:
    if os.environ.get("STREAM_REPLICATOR_CACHE"):
        return Path(os.environ["STREAM_REPLICATOR_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stream-replicator"


def java_binary() -> Path | None:
    """The java Spark will run: $JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where the archive for this JVM and this pyspark install lives (None: no java found)."""
    java = java_binary()
    if java is None:
        return None
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    key = f"{java}:{java.stat().st_mtime_ns}:{jars.resolve()}:{pyspark.__version__}"
    return cache_dir() / f"spark-classes-{hashlib.sha1(key.encode()).hexdigest()[:16]}.jsa"


def partial_path(archive: Path) -> Path:
    return archive.with_name(f"{archive.name}.{os.getpid()}.partial")


def driver_java_options(create_archive: bool = False, light: bool = True, small_heap: bool = False) -> str:
    opts = list(LIGHT_JVM_OPTIONS if light else SAMPLING_JVM_OPTIONS)
    if light and small_heap:
        opts += SMALL_FIRST_HEAP
    archive = archive_path()
    if archive is not None and create_archive:
        archive.parent.mkdir(parents=True, exist_ok=True)
        opts += [f"-XX:ArchiveClassesAtExit={partial_path(archive)}", *QUIET_CDS]
    elif archive is not None and archive.is_file():
        opts += [f"-XX:SharedArchiveFile={archive}", *QUIET_CDS]
    return " ".join(opts)


def finish_archive(timeout: float = 60.0) -> Path | None:
    """After `spark.stop()` in a session started with `create_archive`: end the JVM, wait for
    it to write its archive, and put the archive in place. None if it did not complete."""
    from replicator.spark.internals import gateway_process

    archive = archive_path()
    proc = gateway_process()
    if archive is None or proc is None:
        return None
    partial = partial_path(archive)
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # the gateway JVM exits when its stdin closes
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = -1
    if code != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        log.warning("the JVM did not write its class archive (exit code %s)", code)
        return None
    os.replace(partial, archive)
    return archive
