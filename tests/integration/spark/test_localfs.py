"""Checkpoint files without a forked chmod (replicator.spark.localfs), in a real embedded session.

Each case starts its own driver (a fresh JVM: the class path and `fs.file.impl` are fixed at
launch) with a `chmod` first on PATH that records each call and then runs the real one, so a
fork Hadoop makes is seen, and the modes it leaves are compared with Hadoop's own classes'.
Every streaming test of an embedded replicator runs on these classes too (`make install` builds
them): resume after kill -9, the RocksDB state store, leader takeover.
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

# Under each root: a directory and five files with Hadoop's modes, and a sticky directory.
DRIVER = textwrap.dedent(
    """
    import json, sys
    from replicator.spark.session import build_session

    raw, conf, roots = sys.argv[1] == "raw", json.loads(sys.argv[2]), sys.argv[3:]
    spark = build_session("local[1]", conf=conf, raw_local_checkpoints=raw)
    jvm = spark.sparkContext._jvm
    Path, FsPermission = jvm.org.apache.hadoop.fs.Path, jvm.org.apache.hadoop.fs.permission.FsPermission
    fs = Path("file:///").getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    for root in roots:
        fs.mkdirs(Path("file://" + root + "/dir"), FsPermission.createImmutable(0o750))
        fs.mkdirs(Path("file://" + root + "/shared"))
        fs.setPermission(Path("file://" + root + "/shared"), FsPermission.createImmutable(0o1777))
        for i in range(5):
            out = fs.create(Path("file://" + root + f"/dir/file-{i}"), FsPermission.createImmutable(0o640),
                            True, 4096, 1, 1 << 20, None)
            out.write(b"checkpoint")
            out.close()
    local = jvm.org.apache.hadoop.fs.LocalFileSystem._java_lang_class.isInstance(fs)
    print(json.dumps({"class": fs.getClass().getName(), "is_local": local}))
    spark.stop()
    """
)
HADOOPS = {True: "org.apache.hadoop.fs.RawLocalFileSystem", False: "org.apache.hadoop.fs.LocalFileSystem"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    os.environ["STREAM_REPLICATOR_CACHE"] = str(cache)
    try:
        jar = localfs.build_jar()
    finally:
        del os.environ["STREAM_REPLICATOR_CACHE"]
    assert jar.parent == cache and stat.S_IMODE(jar.stat().st_mode) == 0o644  # a service may read it
    return cache


def run_driver(
    tmp_path: Path, cache: Path, raw: bool, conf: dict[str, str], env: dict[str, str] | None = None
) -> tuple[dict[str, object], dict[str, list[str]]]:
    """The driver's answer with the modes left under each root, and the chmod calls per root:
    `plain` and `setgid`, a directory shared by a group (its subdirectories inherit setgid)."""
    bin_dir, roots = tmp_path / "bin", {"plain": tmp_path / "plain", "setgid": tmp_path / "setgid"}
    bin_dir.mkdir(parents=True)
    for root in roots.values():
        root.mkdir()
    roots["setgid"].chmod(0o2755)
    calls = tmp_path / "chmod-calls"
    chmod = bin_dir / "chmod"
    chmod.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec /bin/chmod "$@"\n')
    chmod.chmod(0o755)
    full_env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "STREAM_REPLICATOR_CACHE": str(cache),
        **(env or {}),
    }
    full_env.pop("SPARK_DIST_CLASSPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, "raw" if raw else "checksummed", json.dumps(conf)]
        + [str(r) for r in roots.values()],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    seen["stderr"] = done.stderr
    lines = calls.read_text().splitlines() if calls.exists() else []
    by_root: dict[str, list[str]] = {}
    for name, root in roots.items():
        seen[f"modes/{name}"] = {
            p.relative_to(root).as_posix(): oct(stat.S_IMODE(p.stat().st_mode))
            for p in sorted(root.rglob("*"))
            if not p.name.endswith(".crc")
        }
        by_root[name] = [line.split()[0] for line in lines if f"{root}/" in line]
    return seen, by_root


@pytest.mark.parametrize("raw", [True, False], ids=["copy-only", "sampled"])
def test_checkpoint_files_get_hadoops_modes_without_a_chmod_process(
    tmp_path: Path, built: Path, raw: bool
) -> None:
    ours, our_calls = run_driver(tmp_path / "ours", built, raw, {})
    # The same session with Hadoop's own class named in the config (the user's setting wins).
    hadoops, hadoop_calls = run_driver(
        tmp_path / "hadoops", built, raw, {"spark.hadoop.fs.file.impl": HADOOPS[raw]}
    )

    assert ours["class"] == (localfs.RAW_CLASS if raw else localfs.CHECKSUMMED_CLASS)
    assert hadoops["class"] == HADOOPS[raw]
    # The state store and Hadoop's local buffers ask for a LocalFileSystem: the sampled one is one.
    assert ours["is_local"] is (not raw)
    for root in ("plain", "setgid"):
        assert ours[f"modes/{root}"] == hadoops[f"modes/{root}"], root
    assert ours["modes/plain"]["dir/file-0"] == "0o640" and ours["modes/plain"]["dir"] == "0o750"
    assert ours["modes/plain"]["shared"] == "0o1777"
    # GNU chmod keeps a directory's setgid bit for a 4-digit mode: so do ours.
    assert ours["modes/setgid"]["dir"] == "0o2750"
    # Hadoop forks for each file and directory (and each .crc). Ours: for the sticky bit, which
    # java.nio cannot set, and for a directory with the setgid bit; never for a file.
    assert hadoop_calls["plain"].count("0640") >= 5
    assert our_calls["plain"] == ["1777"]
    assert "0640" not in our_calls["setgid"]


@pytest.mark.parametrize("raw", [True, False], ids=["copy-only", "sampled"])
def test_a_jvm_that_cannot_load_the_classes_runs_hadoops(tmp_path: Path, built: Path, raw: bool) -> None:
    # A spark-env.sh that sets SPARK_DIST_CLASSPATH (as for a Spark without Hadoop) drops the jar.
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-env.sh").write_text("export SPARK_DIST_CLASSPATH=/nowhere\n")
    seen, calls = run_driver(tmp_path / "run", built, raw, {}, env={"SPARK_CONF_DIR": str(conf_dir)})
    assert seen["class"] == HADOOPS[raw]
    ours = localfs.RAW_CLASS if raw else localfs.CHECKSUMMED_CLASS
    assert f"the JVM did not load {ours}" in str(seen["stderr"])
    assert calls["plain"].count("0640") >= 5
