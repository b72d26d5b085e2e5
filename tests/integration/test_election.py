"""Leader election (`leader_election_name`) with two replicators on one stream entry, as
Choria users run them: one copies, the other stands by; kill -9 the leader and the standby
continues after the target's last copy, with nothing lost or copied twice."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import nats
import pytest
from helpers import cli, run, start_replicator, wait_for, write_config
from nats.js.api import KeyValueConfig

from harness.localnats import NatsCluster
from harness.process import ReplicatorProcess
from harness.streams import copy_differences
from harness.streams import count_messages as count
from replicator.election import BUCKET

from .test_faults import LivePublisher, _create_source, source, target  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration

TTL_S = 5.0


async def create_bucket(url: str, ttl: float) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().create_key_value(KeyValueConfig(bucket=BUCKET, ttl=ttl))
    finally:
        await nc.close()


def entry(src: str, dst: str, candidate: str) -> dict[str, object]:
    return {"stream": "REG", "source_url": src, "target_url": dst, "leader_election_name": candidate}


def test_one_leader_copies_and_a_standby_takes_over_within_15s_of_each_kill_9(
    source: NatsCluster,  # noqa: F811
    target: NatsCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    src, dst = source.url, target.url
    run(_create_source(src))
    configs = {}
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        configs[side] = write_config(tmp_path / side / "sr.yaml", "dc1", [entry(src, dst, f"host-{side}")])

    def copies() -> int:
        return int(run(count(dst, "REG")))

    def failover(leader: ReplicatorProcess, standby: ReplicatorProcess) -> float:
        """kill -9 the leader; seconds until the standby's first copy lands."""
        leader.kill9()
        died = time.monotonic()
        before = copies()
        wait_for(lambda: copies() > before, 60, "the standby's first copy", standby)
        return time.monotonic() - died

    procs = [start_replicator(configs["a"])]
    try:
        with LivePublisher(src, rate=200):
            a = procs[0]
            # No bucket yet: one line that says how to create it, and it keeps trying.
            wait_for(
                lambda: f"the KV bucket {BUCKET} does not exist" in a.output(), 120, "the bucket error", a
            )
            assert copies() == 0
            run(create_bucket(src, TTL_S))
            wait_for(lambda: copies() >= 500, 120, "the leader's copies", a)
            assert "became the leader" in a.output()

            b = start_replicator(configs["b"])
            procs.append(b)
            wait_for(lambda: "campaigning for SR_dc1_REG" in b.output(), 120, "b campaigning", b)
            time.sleep(3)
            assert "became the leader" not in b.output()  # one leader at a time
            shown = cli("admin", "election", "--config", str(configs["b"]))
            assert shown.returncode == 0, shown.stderr
            assert "SR_dc1_REG" in shown.stdout and "led by host-a," in shown.stdout, shown.stdout

            times = [failover(a, b)]
            assert "became the leader" in b.output()
            # The killed one comes back as the standby; then the new leader is killed too.
            a = start_replicator(configs["a"])
            procs.append(a)
            wait_for(lambda: "campaigning for SR_dc1_REG" in a.output(), 120, "a campaigning again", a)
            time.sleep(3)
            times.append(failover(b, a))
            print(
                f"\nfailover (kill -9 to the standby's first copy, TTL {TTL_S:.0f} s): "
                + ", ".join(f"{t:.1f} s" for t in times)
            )
            assert max(times) <= 15, a.output()
            time.sleep(2)
        wait_for(lambda: copies() == run(count(src, "REG")), 120, "the copy to catch up", a)
        assert run(copy_differences(src, "REG", dst, "REG")) == []  # no gap, nothing twice, in order
        assert a.stop() == 0, a.output()
        assert "Traceback" not in a.output(10**9)
    finally:
        for p in procs:
            p.kill9()


GO_BINARY = Path(
    os.environ.get("SR_GO_BINARY", "/work/shared/peers/choria-stream-replicator/stream-replicator")
)


async def leader_of(url: str, key: str) -> str:
    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value(BUCKET)
        return (await kv.get(key)).value.decode()
    finally:
        await nc.close()


def test_ours_and_the_go_original_share_one_election_and_ours_continues_after_the_go_leaders_last_copy(
    source: NatsCluster,  # noqa: F811
    target: NatsCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The migration path: a Go v0.9 instance leads, ours stands by on the same key; the Go
    leader is killed and ours continues after the last source sequence the Go one copied."""
    assert GO_BINARY.is_file(), (
        f"the Go Choria replicator v0.9 binary is needed: set SR_GO_BINARY (not at {GO_BINARY})"
    )
    src, dst = source.url, target.url
    run(_create_source(src))
    run(_create_source(dst))
    run(create_bucket(src, TTL_S))
    (tmp_path / "go").mkdir()
    (tmp_path / "py").mkdir()
    go_cfg = write_config(tmp_path / "go" / "sr.yaml", "dc1", [entry(src, dst, "go-1")])
    py_cfg = write_config(tmp_path / "py" / "sr.yaml", "dc1", [entry(src, dst, "py-1")])

    def copies() -> int:
        return int(run(count(dst, "REG")))

    go_log = tmp_path / "go" / "go.log"
    with go_log.open("w") as log:
        go = subprocess.Popen([str(GO_BINARY), "replicate", "--config", str(go_cfg)], stdout=log, stderr=log)
    ours = None
    try:
        with LivePublisher(src, rate=200):
            wait_for(lambda: copies() >= 500, 120, "the Go leader's copies")
            assert run(leader_of(src, "SR_dc1_REG")) == "go-1"
            ours = start_replicator(py_cfg)
            wait_for(lambda: "campaigning for SR_dc1_REG" in ours.output(), 120, "ours campaigning", ours)
            time.sleep(3)
            assert "became the leader" not in ours.output()  # the Go instance still leads
            assert run(leader_of(src, "SR_dc1_REG")) == "go-1"

            go.kill()
            go.wait(10)
            died, before = time.monotonic(), copies()
            wait_for(lambda: copies() > before, 60, "ours' first copy after the Go leader died", ours)
            print(f"\nGo leader killed: ours copied {time.monotonic() - died:.1f} s later")
            assert run(leader_of(src, "SR_dc1_REG")) == "py-1"
            time.sleep(2)
        wait_for(lambda: copies() == run(count(src, "REG")), 120, "the copy to catch up", ours)
        # Every source message once, in order: what the Go instance copied, then ours after it.
        assert run(copy_differences(src, "REG", dst, "REG")) == [], go_log.read_text()[-3000:]
        assert ours.stop() == 0, ours.output()
    finally:
        if go.poll() is None:
            go.kill()
        if ours is not None:
            ours.kill9()
