"""Hadoop's local file system without a forked `chmod` per file, for embedded checkpoints.

pyspark ships no Hadoop native library, so Hadoop's RawLocalFileSystem sets the permission of
every file and directory it creates by starting a `chmod` process: every offset, commit and
state-store file of every batch, ~2.5-3 ms each in a JVM this size, ~15 per sampled batch
(a JFR recording of a sampled trickle: 286 chmod processes in 19 s). The two small classes in
`java/` set the same bits with java.nio's chmod(2) instead (docs/performance.md has the
before/after). They are compiled once per Java and Hadoop install, with the JDK's javac, into
the cache directory beside the JVM's class archive (`make install` does it first; a start that
finds none builds it). Without javac, Spark runs with Hadoop's own classes, as before.

The jar joins the JVM's class path through SPARK_DIST_CLASSPATH, which Spark's launcher puts
after its own jars: the class archive, dumped with those jars, still matches (a JVM uses one
only when its dump-time class path is a prefix of the run's).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from replicator.spark.jvm import cache_dir, java_binary

log = logging.getLogger(__name__)

SOURCES = Path(__file__).with_name("java")
# For queries that keep no state (RAW_LOCAL_CONF's RawLocalFileSystem), and for the rest
# (Hadoop's checksummed LocalFileSystem, the class Spark's RocksDB state store asks for).
RAW_CLASS = "streamreplicator.hadoop.NioRawLocalFileSystem"
CHECKSUMMED_CLASS = "streamreplicator.hadoop.NioLocalFileSystem"
_DIST_CLASSPATH = "SPARK_DIST_CLASSPATH"


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def _javac() -> Path | None:
    java = java_binary()
    beside = java.parent / "javac" if java is not None else None
    if beside is not None and beside.is_file():
        return beside
    found = shutil.which("javac")
    return Path(found).resolve() if found else None


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def jar_path() -> Path | None:
    """Where the jar for this Java, this pyspark install and these sources lives (None: no java)."""
    java = java_binary()
    if java is None:
        return None
    import pyspark

    key = hashlib.sha1(f"{java}:{_spark_jars().resolve()}:{pyspark.__version__}".encode())
    for source in _sources():
        key.update(source.read_bytes())
    return cache_dir() / f"nio-localfs-{key.hexdigest()[:16]}.jar"


def build_jar() -> Path:
    """Compile the classes and write the jar in place (aside, then renamed: concurrent builds
    each write a whole one). Raises RuntimeError with the reason when it cannot."""
    target = jar_path()
    javac = _javac()
    if target is None or javac is None:
        raise RuntimeError("no javac found: install a JDK 17+ (not only a JRE) or set JAVA_HOME to one")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sr-localfs-") as work:
        classes = Path(work) / "classes"
        done = subprocess.run(
            [str(javac), "--release", "17", "-nowarn", "-cp", f"{_spark_jars()}/*", "-d", str(classes)]
            + [str(s) for s in _sources()],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"javac failed to compile {SOURCES}: {done.stderr.strip()[-2000:]}")
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        with zipfile.ZipFile(partial, "w") as jar:
            for cls in sorted(classes.rglob("*.class")):
                jar.write(cls, cls.relative_to(classes).as_posix())
        os.replace(partial, target)
    return target


def ready_jar(build: bool = True) -> Path | None:
    """The jar, built first if it is missing and `build` (None: it cannot be, which is logged)."""
    target = jar_path()
    if target is not None and target.is_file():
        return target
    if not build:
        return None
    try:
        built = build_jar()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        log.info("checkpoint files keep Hadoop's forked chmod (%s)", e)
        return None
    log.info("built %s (checkpoint files without a forked chmod each)", built)
    return built


def local_fs_conf(raw: bool) -> dict[str, str]:
    """The Spark settings that make `file:` paths use the jar's classes; `raw`: no `.crc` files."""
    return {"spark.hadoop.fs.file.impl": RAW_CLASS if raw else CHECKSUMMED_CLASS}


def add_to_launch_class_path(jar: Path) -> None:
    """Put the jar on the class path of the JVM this process is about to launch."""
    parts = [p for p in os.environ.get(_DIST_CLASSPATH, "").split(os.pathsep) if p]
    if str(jar) not in parts:
        os.environ[_DIST_CLASSPATH] = os.pathsep.join([*parts, str(jar)])


if __name__ == "__main__":  # `make install`: build it now rather than at the first start
    print(f"Hadoop local file system without forked chmod: {build_jar()}")
