"""Checkpoint files without a forked chmod (replicator.spark.localfs), in a real embedded session.

Each case starts its own driver (a fresh JVM: the class path and `fs.file.impl` are fixed at
launch) with a `chmod` first on PATH that records each call and then runs the real one, so a
fork Hadoop makes is seen, and the modes it leaves are compared with Hadoop's own classes'.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from replicator.spark import localfs

DRIVER = textwrap.dedent(
    """
    import json, sys
    from replicator.spark.session import build_session

    raw, conf, work = sys.argv[1] == "raw", json.loads(sys.argv[2]), sys.argv[3]
    spark = build_session("local[1]", conf=conf, raw_local_checkpoints=raw)
    jvm = spark.sparkContext._jvm
    Path, FsPermission = jvm.org.apache.hadoop.fs.Path, jvm.org.apache.hadoop.fs.permission.FsPermission
    fs = Path("file://" + work).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    local = jvm.org.apache.hadoop.fs.LocalFileSystem
    fs.mkdirs(Path("file://" + work + "/dir"), FsPermission.createImmutable(0o750))
    fs.mkdirs(Path("file://" + work + "/shared"))
    fs.setPermission(Path("file://" + work + "/shared"), FsPermission.createImmutable(0o1777))
    for i in range(5):
        out = fs.create(Path("file://" + work + f"/dir/file-{i}"), FsPermission.createImmutable(0o640),
                        True, 4096, 1, 1 << 20, None)
        out.write(b"checkpoint")
        out.close()
    print(json.dumps({"class": fs.getClass().getName(),
                      "is_local": local._java_lang_class.isInstance(fs)}))
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    os.environ["STREAM_REPLICATOR_CACHE"] = str(cache)
    try:
        jar = localfs.build_jar()
    finally:
        del os.environ["STREAM_REPLICATOR_CACHE"]
    assert jar.parent == cache and jar.is_file()
    return cache


def run_driver(
    tmp_path: Path, cache: Path, raw: bool, conf: dict[str, str]
) -> tuple[dict[str, object], list[str]]:
    bin_dir, work = tmp_path / "bin", tmp_path / "work"
    bin_dir.mkdir(parents=True)
    work.mkdir()
    calls = tmp_path / "chmod-calls"
    chmod = bin_dir / "chmod"
    chmod.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec /bin/chmod "$@"\n')
    chmod.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "STREAM_REPLICATOR_CACHE": str(cache),
    }
    env.pop("SPARK_DIST_CLASSPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, "raw" if raw else "checksummed", json.dumps(conf), str(work)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    seen["modes"] = {
        p.relative_to(work).as_posix(): oct(stat.S_IMODE(p.stat().st_mode))
        for p in sorted(work.rglob("*"))
        if not p.name.endswith(".crc")
    }
    return seen, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("raw", [True, False], ids=["copy-only", "sampled"])
def test_checkpoint_files_get_hadoops_modes_without_a_chmod_process(
    tmp_path: Path, built: Path, raw: bool
) -> None:
    ours, our_calls = run_driver(tmp_path / "ours", built, raw, {})
    # The same session with Hadoop's own class named in the config (the user's setting wins).
    hadoops_class = (
        "org.apache.hadoop.fs.RawLocalFileSystem" if raw else "org.apache.hadoop.fs.LocalFileSystem"
    )
    hadoops, hadoop_calls = run_driver(
        tmp_path / "hadoops", built, raw, {"spark.hadoop.fs.file.impl": hadoops_class}
    )

    assert ours["class"] == (localfs.RAW_CLASS if raw else localfs.CHECKSUMMED_CLASS)
    assert hadoops["class"] == hadoops_class
    # The state store and Hadoop's local buffers ask for a LocalFileSystem: the sampled one is one.
    assert ours["is_local"] is (not raw)
    assert ours["modes"] == hadoops["modes"]
    assert ours["modes"]["dir/file-0"] == "0o640" and ours["modes"]["dir"] == "0o750"
    assert ours["modes"]["shared"] == "0o1777"
    # Hadoop forks for each file and directory (and each .crc); ours only for the sticky bit,
    # which java.nio cannot set.
    assert len(hadoop_calls) >= 7
    assert [c.split()[0] for c in our_calls] == ["1777"]
    assert [c.split()[0] for c in hadoop_calls].count("0640") >= 5
