"""The chmod-free local file system's plumbing: its jar's place, its settings, its fallbacks."""

from __future__ import annotations

import logging
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from replicator.spark import localfs
from replicator.spark.session import embedded_settings
from replicator.spark.session_args import SessionArgs

FILE_IMPL = "spark.hadoop.fs.file.impl"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STREAM_REPLICATOR_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def jar(cache: Path) -> Path:
    """A whole jar in place (its classes' bytes are not read before the JVM loads them)."""
    path = localfs.jar_path()
    assert path is not None and path.parent == cache
    with zipfile.ZipFile(path, "w") as z:
        for name in localfs.JAR_CLASSES:
            z.writestr(f"{name.replace('.', '/')}.class", b"\xca\xfe\xba\xbe")
    return path


def test_copy_only_queries_get_the_raw_class_and_the_rest_the_checksummed_one() -> None:
    assert localfs.local_fs_conf(raw=True) == {FILE_IMPL: localfs.RAW_CLASS}
    assert localfs.local_fs_conf(raw=False) == {FILE_IMPL: localfs.CHECKSUMMED_CLASS}


def test_the_jar_joins_the_launch_class_path_after_what_is_there_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPARK_DIST_CLASSPATH", "/opt/hadoop/conf")
    path = tmp_path / "x.jar"
    localfs.add_to_launch_class_path(path)
    localfs.add_to_launch_class_path(path)
    assert os.environ["SPARK_DIST_CLASSPATH"] == f"/opt/hadoop/conf{os.pathsep}{path}"


def test_a_whole_jar_is_used_and_a_cut_one_is_not(cache: Path, jar: Path) -> None:
    assert localfs.ready_jar(build=False) == jar
    jar.write_bytes(jar.read_bytes()[:20])  # a build cut short by a crash, say
    assert localfs.ready_jar(build=False) is None


def test_a_jar_missing_one_of_its_classes_is_not_used(cache: Path, jar: Path) -> None:
    with zipfile.ZipFile(jar, "w") as z:  # the file system's classes, not the pickler's
        for name in localfs.OUR_CLASSES:
            z.writestr(f"{name.replace('.', '/')}.class", b"\xca\xfe\xba\xbe")
    assert localfs.ready_jar(build=False) is None


def test_without_javac_a_start_keeps_hadoops_classes_says_why_and_does_not_try_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(localfs, "_javac", lambda: None)
    with caplog.at_level(logging.INFO, logger=localfs.__name__):
        assert localfs.ready_jar() is None
    assert "no javac found: install a JDK 17+" in caplog.text

    def build_again() -> Path:
        raise AssertionError("a start after a failed build ran javac again")

    monkeypatch.setattr(localfs, "build_jar", build_again)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=localfs.__name__):
        assert localfs.ready_jar() is None
    assert "no javac found" in caplog.text and "to try again" in caplog.text


def test_a_javac_installed_since_the_failed_build_is_tried(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(localfs, "_javac", lambda: None)
    assert localfs.ready_jar() is None
    javac = tmp_path / "javac"
    javac.write_text("")
    monkeypatch.setattr(localfs, "_javac", lambda: javac)
    built = tmp_path / "built.jar"
    monkeypatch.setattr(localfs, "build_jar", lambda: built)
    assert localfs.ready_jar() == built


def test_a_build_that_timed_out_is_tried_again_at_the_next_start(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def slow() -> Path:
        raise subprocess.TimeoutExpired("javac", 120)

    monkeypatch.setattr(localfs, "build_jar", slow)
    assert localfs.ready_jar() is None
    built = tmp_path / "built.jar"
    monkeypatch.setattr(localfs, "build_jar", lambda: built)
    assert localfs.ready_jar() == built


def test_our_class_stays_off_the_jvms_command_line() -> None:
    ours = {FILE_IMPL: localfs.RAW_CLASS, "spark.ui.enabled": "false"}
    assert localfs.for_the_launch(ours) == {"spark.ui.enabled": "false"}
    hadoops = {FILE_IMPL: "org.apache.hadoop.fs.RawLocalFileSystem"}
    assert localfs.for_the_launch(hadoops) == hadoops


def test_a_class_the_launched_jvm_cannot_load_gives_way_to_hadoops() -> None:
    def loads(name: str) -> bool:
        return False

    raw = {FILE_IMPL: localfs.RAW_CLASS, "spark.ui.enabled": "false"}
    assert localfs.for_the_launched_jvm(raw, loads) == {
        FILE_IMPL: "org.apache.hadoop.fs.RawLocalFileSystem",
        "spark.ui.enabled": "false",
    }
    # Named, not dropped: a setting left out could be taken from the JVM's system properties.
    checksummed = {FILE_IMPL: localfs.CHECKSUMMED_CLASS}
    assert localfs.for_the_launched_jvm(checksummed, loads) == {
        FILE_IMPL: "org.apache.hadoop.fs.LocalFileSystem"
    }
    assert localfs.for_the_launched_jvm(raw, lambda name: True) == raw
    users = {FILE_IMPL: "com.example.TheirFileSystem"}
    assert localfs.for_the_launched_jvm(users, loads) == users


def embedded(master: str = "local[*]", **kw: object) -> dict[str, str]:
    return embedded_settings(SessionArgs(master=master, app_name="t", **kw))  # type: ignore[arg-type]


def test_an_embedded_session_names_our_classes_and_puts_the_jar_on_the_class_path(
    jar: Path, launch_env: None
) -> None:
    assert embedded(raw_local_checkpoints=True)[FILE_IMPL] == localfs.RAW_CLASS
    assert embedded()[FILE_IMPL] == localfs.CHECKSUMMED_CLASS
    assert os.environ["SPARK_DIST_CLASSPATH"] == str(jar)


def test_the_configs_setting_wins(jar: Path, launch_env: None) -> None:
    theirs = {FILE_IMPL: "org.apache.hadoop.fs.LocalFileSystem"}
    assert embedded(conf=theirs, raw_local_checkpoints=True)[FILE_IMPL] == theirs[FILE_IMPL]


def test_a_cluster_and_the_class_archive_dump_get_hadoops_classes(jar: Path, launch_env: None) -> None:
    assert FILE_IMPL not in embedded(master="spark://somewhere:7077", raw_local_checkpoints=True)
    # The archive must not depend on the jar: a rebuilt jar would make the JVM refuse it.
    dump = embedded(create_class_archive=True, raw_local_checkpoints=True)
    assert dump[FILE_IMPL] == "org.apache.hadoop.fs.RawLocalFileSystem"
    assert "SPARK_DIST_CLASSPATH" not in os.environ


def test_without_a_jar_a_copy_only_session_still_skips_the_crc_files(
    cache: Path, launch_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(localfs, "_javac", lambda: None)
    assert embedded(raw_local_checkpoints=True)[FILE_IMPL] == "org.apache.hadoop.fs.RawLocalFileSystem"
    assert FILE_IMPL not in embedded()
