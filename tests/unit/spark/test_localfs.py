"""The chmod-free local file system's plumbing: its jar's place, its settings, its fallback."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from replicator.spark import localfs


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STREAM_REPLICATOR_CACHE", str(tmp_path))
    return tmp_path


def test_copy_only_queries_get_the_raw_class_and_the_rest_the_checksummed_one() -> None:
    assert localfs.local_fs_conf(raw=True) == {"spark.hadoop.fs.file.impl": localfs.RAW_CLASS}
    assert localfs.local_fs_conf(raw=False) == {"spark.hadoop.fs.file.impl": localfs.CHECKSUMMED_CLASS}


def test_the_jar_joins_the_launch_class_path_after_what_is_there_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPARK_DIST_CLASSPATH", "/opt/hadoop/conf")
    jar = tmp_path / "x.jar"
    localfs.add_to_launch_class_path(jar)
    localfs.add_to_launch_class_path(jar)
    assert os.environ["SPARK_DIST_CLASSPATH"] == f"/opt/hadoop/conf{os.pathsep}{jar}"


def test_the_jar_lives_in_the_cache_and_is_used_when_there(cache: Path) -> None:
    jar = localfs.jar_path()
    assert jar is not None and jar.parent == cache
    assert localfs.ready_jar(build=False) is None
    jar.write_bytes(b"PK")
    assert localfs.ready_jar(build=False) == jar


def test_without_javac_a_start_keeps_hadoops_classes_and_says_why(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(localfs, "_javac", lambda: None)
    with caplog.at_level(logging.INFO, logger=localfs.__name__):
        assert localfs.ready_jar() is None
    assert "no javac found: install a JDK 17+" in caplog.text
    assert not list(cache.iterdir())
