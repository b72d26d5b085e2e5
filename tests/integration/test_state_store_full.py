"""The state store's filesystem runs out of space while a sampled stream is copied: the
replicator says so in one line, loses nothing, and continues exactly once there is room."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SLOW_S, create_stream, publish, run, start_replicator, wait_for, write_config

from harness.smallfs import SmallFilesystem, fill
from harness.streams import count_messages as count

from .test_sampling import SUBJECTS, got, sampling_stream, settle_expected

pytestmark = pytest.mark.integration

FULL = "the state store's filesystem is full"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[SmallFilesystem]:
    with SmallFilesystem(tmp_path / "statefs", size_mb=16) as fs:
        yield fs


def registrations(round_no: int, senders: range) -> list[tuple[str, bytes, dict[str, str] | None]]:
    return [
        (f"{SUBJECTS[0][:-1]}n{i}", json.dumps({"sender": f"n{i}", "round": round_no, "pad": "x" * 900}).encode(), None)
        for i in senders
    ]  # fmt: skip


def test_a_full_state_store_is_one_clear_line_and_a_clean_continue_once_there_is_room(
    source_server, nats_server, small_fs: SmallFilesystem, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", SUBJECTS))
    run(create_stream(src, "ADV", ["choria.adv.>"]))
    cfg = write_config(
        tmp_path / "sr.yaml", "dc1", [sampling_stream(src, dst)], state_store=str(small_fs.path)
    )
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        for r in range(4):  # 100 senders every 0.5 s
            run(publish(src, registrations(r, range(100))))
            time.sleep(0.5)
        # A sampled stream's first batch starts Spark's task workers and its RocksDB state: 20 s
        # here alone, 61 s once in a full CI run on 2 busy cores (the query had started).
        wait_for(lambda: run(count(dst, "REG")) >= 100, SLOW_S, "the first copies", rep)
        filler = fill(small_fs.path)  # the disk is full from here on
        for r in range(4, 12):  # the fleet goes on; 50 new senders join
            run(publish(src, registrations(r, range(150))))
            time.sleep(0.5)
        wait_for(lambda: FULL in rep.output(), SLOW_S, "the full-disk line", rep)
        time.sleep(5)  # retrying meanwhile, in vain
        filler.unlink()  # room again
        want_copied, want_advs = settle_expected(src, dst, rep)
    finally:
        assert rep.stop() == 0, rep.output()
    copied_seqs, advs, docs = got(src, dst, "REG", "ADV", "dc1")
    assert copied_seqs == want_copied  # nothing lost, nothing twice
    assert advs == want_advs  # every advisory exactly once
    assert len({d["event_id"] for d in docs}) == len(docs)
    log = rep.output(10**9)
    errors = [ln for ln in log.splitlines() if " ERROR replicator" in ln]
    assert errors and all(FULL in ln and "free space there" in ln for ln in errors), errors
    assert "Traceback" not in log
