"""Hadoop's local file system without a forked `chmod` per file, for embedded checkpoints.

pyspark ships no Hadoop native library, so Hadoop's RawLocalFileSystem sets the permission of
every file and directory it creates by starting a `chmod` process: every offset, commit and
state-store file of every batch, ~2.5-3 ms each in a JVM this size, ~15 per sampled batch
(a JFR recording of a sampled trickle: 286 chmod processes in 19 s). The two small classes in
`java/` set the same bits with java.nio's chmod(2) instead (docs/performance.md has the
before/after). They are compiled once per Java and Hadoop install, with the JDK's javac, into
the cache directory beside the JVM's class archive (`make install` does it first; a start that
finds none builds it). Without javac, Spark runs with Hadoop's own classes, as before.

The same jar holds `streamreplicator.spark.BinaryPickler` (replicator.spark.binary_pickler).

The jar joins the JVM's class path through SPARK_DIST_CLASSPATH, which Spark's launcher puts
after its own jars. The class archive is dumped without it, so a rebuilt jar never invalidates
the archive (a JVM uses one only when its dump-time class path is a prefix of the run's). The
launched JVM is asked whether it loads the classes before a session names them (a spark-env.sh
that sets SPARK_DIST_CLASSPATH replaces ours): if it does not, Hadoop's classes are used.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from replicator.spark.jvm import cache_dir, java_binary

log = logging.getLogger(__name__)

SOURCES = Path(__file__).with_name("java")
# For queries that keep no state (RAW_LOCAL_CONF's RawLocalFileSystem), and for the rest
# (Hadoop's checksummed LocalFileSystem, the class Spark's RocksDB state store asks for).
RAW_CLASS = "streamreplicator.hadoop.NioRawLocalFileSystem"
CHECKSUMMED_CLASS = "streamreplicator.hadoop.NioLocalFileSystem"
OUR_CLASSES = (RAW_CLASS, CHECKSUMMED_CLASS)
# Also in the jar: Spark's binary values pickled for Python workers as bytes
# (replicator.spark.binary_pickler).
PICKLER_CLASS = "streamreplicator.spark.BinaryPickler"
JAR_CLASSES = (*OUR_CLASSES, PICKLER_CLASS)
# What each falls back to when the JVM cannot load it.
HADOOPS_CLASS = {
    RAW_CLASS: "org.apache.hadoop.fs.RawLocalFileSystem",
    CHECKSUMMED_CLASS: "org.apache.hadoop.fs.LocalFileSystem",
}
_FILE_IMPL = "spark.hadoop.fs.file.impl"
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


def _holds_the_classes(jar: Path) -> bool:
    """A whole jar with every class (a build cut short by a crash leaves no such file)."""
    wanted = {f"{name.replace('.', '/')}.class" for name in JAR_CLASSES}
    try:
        with zipfile.ZipFile(jar) as z:
            return wanted <= set(z.namelist()) and z.testzip() is None
    except (OSError, zipfile.BadZipFile):
        return False


def _failure_note(target: Path) -> Path:
    return target.with_name(f"{target.name}.failed")


def _javac_key() -> str:
    """Which javac a note of a failed build is about: a JDK installed since is tried."""
    javac = _javac()
    return f"{javac}:{javac.stat().st_mtime_ns}" if javac is not None else "no javac"


class BuildRefused(RuntimeError):
    """The build cannot succeed with this javac (none, or it rejects the sources): worth noting,
    unlike a timeout or a full disk, which the next start tries again."""


def build_jar() -> Path:
    """Compile the classes and write the jar in place (synced aside, then renamed: concurrent
    builds each write a whole one). Raises RuntimeError with the reason when it cannot."""
    if java_binary() is None:
        raise BuildRefused("no java found: set JAVA_HOME or put a JDK 17+ on PATH")
    target, javac = jar_path(), _javac()
    if target is None or javac is None:
        raise BuildRefused("no javac found: install a JDK 17+ (not only a JRE) or set JAVA_HOME to one")
    target.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(target.parent, os.W_OK):
        raise RuntimeError(
            f"{target.parent} is not writable: set STREAM_REPLICATOR_CACHE to a directory that is"
        )
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
            raise BuildRefused(f"javac failed to compile {SOURCES}: {done.stderr.strip()[-2000:]}")
        fd, partial_name = tempfile.mkstemp(dir=target.parent, prefix=f"{target.name}.", suffix=".partial")
        partial = Path(partial_name)
        try:
            os.fchmod(fd, 0o644)  # mkstemp's 0600 would keep other users (a service's) out
            with os.fdopen(fd, "wb") as out:
                with zipfile.ZipFile(out, "w") as jar:
                    for cls in sorted(classes.rglob("*.class")):
                        jar.write(cls, cls.relative_to(classes).as_posix())
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    _failure_note(target).unlink(missing_ok=True)
    return target


def ready_jar(build: bool = True) -> Path | None:
    """The jar, built first if it is missing and `build`; None where it cannot be (logged). A
    build this javac cannot do is noted beside the jar so that later starts do not run javac
    again (until another javac is found, or the note is deleted)."""
    target: Path | None = None
    try:
        target = jar_path()
        if target is None:
            return None
        if target.is_file() and _holds_the_classes(target):
            return target
        if not build:
            return None
        note = _failure_note(target)
        if note.is_file():
            key, _, why = note.read_text().partition("\n")
            if key == _javac_key():
                log.info("checkpoint files keep Hadoop's forked chmod (%s)", why.strip())
                return None
        built = build_jar()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        log.info("checkpoint files keep Hadoop's forked chmod (%s)", e)
        if isinstance(e, BuildRefused) and target is not None:
            note = _failure_note(target)
            with contextlib.suppress(OSError):
                note.parent.mkdir(parents=True, exist_ok=True)
                note.write_text(f"{_javac_key()}\n{e}; delete {note} to try again\n")
        return None
    log.info("built %s (checkpoint files without a forked chmod each)", built)
    return built


def local_fs_conf(raw: bool) -> dict[str, str]:
    """The Spark settings that make `file:` paths use the jar's classes; `raw`: no `.crc` files."""
    return {_FILE_IMPL: RAW_CLASS if raw else CHECKSUMMED_CLASS}


def for_the_launch(settings: dict[str, str]) -> dict[str, str]:
    """`settings` without our class, for the JVM's command line: Spark copies that into the
    JVM's system properties, where a later fallback could not undo it, and spark-submit opens
    `file:` paths with it (`spark.jars`) before anything can check that the class loads."""
    return {k: v for k, v in settings.items() if not (k == _FILE_IMPL and v in OUR_CLASSES)}


def for_the_launched_jvm(settings: dict[str, str], loads: Callable[[str], bool]) -> dict[str, str]:
    """`settings`, for the session in the launched JVM: with Hadoop's class instead of ours
    where that JVM cannot load ours (`loads`: whether it loads a class by name)."""
    named = settings.get(_FILE_IMPL)
    if named not in OUR_CLASSES or loads(named):
        return settings
    log.warning(
        "the JVM did not load %s (SPARK_DIST_CLASSPATH set by a spark-env.sh?): checkpoint files "
        "keep Hadoop's forked chmod",
        named,
    )
    return {**settings, _FILE_IMPL: HADOOPS_CLASS[named]}


def add_to_launch_class_path(jar: Path) -> None:
    """Put the jar on the class path of the JVM this process is about to launch."""
    parts = [p for p in os.environ.get(_DIST_CLASSPATH, "").split(os.pathsep) if p]
    if str(jar) not in parts:
        os.environ[_DIST_CLASSPATH] = os.pathsep.join([*parts, str(jar)])


if __name__ == "__main__":  # `make install`: build it now rather than at the first start
    import sys

    try:
        print(f"Hadoop local file system without forked chmod: {build_jar()}")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        sys.exit(f"error: could not build the chmod-free local file system: {e}")
