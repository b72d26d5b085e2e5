"""The Spark driver's JVM options: C1 always, with the code cache C1 alone would shrink; the serial
collector for copy-only jobs; the class archive only when complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.spark import jvm


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STREAM_REPLICATOR_CACHE", str(tmp_path))
    return tmp_path


def test_without_an_archive_a_copy_job_gets_c1_and_the_serial_collector_a_sampling_job_c1(
    cache: Path,
) -> None:
    c1 = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    assert jvm.driver_java_options() == f"{c1} -XX:+UseSerialGC"
    # A small first heap only where no batch's rows pass through the JVM, and never for sampling.
    assert jvm.driver_java_options(small_heap=True) == f"{c1} -XX:+UseSerialGC -Xms32m -Xmn16m"
    assert jvm.driver_java_options(light=False, small_heap=True) == c1
    assert jvm.driver_java_options(light=False) == c1


def test_an_archive_in_place_is_used(cache: Path) -> None:
    archive = jvm.archive_path()
    assert archive is not None and archive.parent == cache
    archive.write_bytes(b"x")
    assert f"-XX:SharedArchiveFile={archive}" in jvm.driver_java_options().split()


def test_creating_writes_to_a_partial_file_never_to_the_archive_itself(cache: Path) -> None:
    archive = jvm.archive_path()
    assert archive is not None
    opts = jvm.driver_java_options(create_archive=True).split()
    assert f"-XX:ArchiveClassesAtExit={jvm.partial_path(archive)}" in opts
    assert not any(o.startswith("-XX:SharedArchiveFile") for o in opts)


def test_the_archive_name_changes_with_the_java_binary(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = jvm.archive_path()
    fake_home = cache / "jdk"
    (fake_home / "bin").mkdir(parents=True)
    (fake_home / "bin" / "java").write_text("")
    monkeypatch.setenv("JAVA_HOME", str(fake_home))
    assert jvm.archive_path() not in (None, first)
