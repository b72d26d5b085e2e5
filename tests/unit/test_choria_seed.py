"""When a sampled entry seeds its first batch from Choria's state file, and when it retires the
file: never into a checkpoint that has a commit, never from a file whose senders all expired."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from replicator.config import parse_config
from replicator.replication import StreamReplication


class Commits:
    """A checkpoint's files, as far as the seeding looks at them: its commit log's names."""

    def __init__(self, *names: str) -> None:
        self.commits = list(names)

    def names(self, directory: str) -> list[str]:
        assert directory == "commits"
        return self.commits


def entry(tmp_path: Path) -> tuple[StreamReplication, Path]:
    cfg = parse_config({"name": "dc1", "state_store": str(tmp_path), "streams": [{
        "stream": "REG", "source_url": "nats://a:4222", "target_url": "nats://b:4222",
        "inspect_field": "sender", "inspect_duration": "1h",
    }]})  # fmt: skip
    r = StreamReplication.__new__(StreamReplication)  # the seeding only: no Spark, no servers
    r.cfg, r.s, r.log, r._choria_seeded = cfg, cfg.streams[0], logging.getLogger("seed"), None
    go = tmp_path / "REG_dc1.json"
    go.write_text(
        json.dumps(
            {"Items": {"n1": {"seen": "2026-01-01T00:00:00Z", "copied": "2026-01-01T00:00:00Z", "size": 10}}}
        )
    )
    return r, go


def test_a_fresh_checkpoint_is_seeded_and_the_file_retired_only_once_a_batch_committed(
    tmp_path: Path,
) -> None:
    r, go = entry(tmp_path)
    files = Commits()
    assert r._choria_seed(files)  # a table for n1's bucket
    files.commits.append(".0.5f3e.tmp")  # Spark still writing the commit: not one yet
    r.batch_committed()
    assert go.is_file()
    files.commits.append("0")
    r.batch_committed()
    assert not go.exists() and (tmp_path / "REG_dc1.json.imported").is_file()


def test_a_checkpoint_with_a_commit_is_never_seeded_and_a_leftover_file_is_retired(tmp_path: Path) -> None:
    r, go = entry(tmp_path)
    assert r._choria_seed(Commits("0", "1")) is None
    assert not go.exists() and (tmp_path / "REG_dc1.json.imported").is_file()


def test_a_file_older_than_inspect_duration_is_not_imported(tmp_path: Path) -> None:
    r, go = entry(tmp_path)
    old = time.time() - 2 * 3600
    os.utime(go, (old, old))
    assert r._choria_seed(Commits()) is None
    assert go.is_file()  # left as it is: it is Choria's
