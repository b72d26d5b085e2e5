"""A sampled stream switched from Choria's Go replicator (v0.9) to ours keeps its senders' history:
the fleet sees no `new` advisory and no copy it would not have had from the Go one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import (
    SLOW_S,
    create_stream,
    publish,
    run,
    start_replicator,
    wait_for,
    wait_handled,
    write_config,
)

from harness.localnats import NatsCluster
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.sampling.choria_state import choria_state_file

from .test_faults import source, target  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration

GO_BINARY = Path(
    os.environ.get("SR_GO_BINARY", "/work/shared/peers/choria-stream-replicator/stream-replicator")
)
SENDERS = 40


def registrations(round_: int) -> list[tuple[str, bytes, None]]:
    return [
        (f"reg.n{i}", json.dumps({"sender": f"n{i}", "round": round_, "pad": "x" * 500}).encode(), None)
        for i in range(SENDERS)
    ]


def events(url: str) -> list[str]:
    return [json.loads(m.data)["event"] for m in run(read_all(url, "ADV"))]


def test_a_sampled_stream_switched_from_the_go_replicator_advises_and_copies_nothing_again(
    source: NatsCluster,  # noqa: F811
    target: NatsCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    assert GO_BINARY.is_file(), (
        f"the Go Choria replicator v0.9 binary is needed: set SR_GO_BINARY (not at {GO_BINARY})"
    )
    src, dst = source.url, target.url
    run(create_stream(src, "REG", ["reg.>"]))
    run(create_stream(src, "ADV", ["adv.>"]))
    run(create_stream(dst, "REG", ["reg.>"]))
    entry = {
        "name": "reg", "stream": "REG", "source_url": src, "target_url": dst, "inspect_field": "sender",
        "inspect_duration": "1h", "advisory": {"subject": "adv.%s.%v"},
    }  # fmt: skip
    # One file for both, as a user switching would keep it: the same state_store.
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [entry])
    state_file = choria_state_file(tmp_path / "state", "REG", "reg")

    log = (tmp_path / "go.log").open("w")
    go = subprocess.Popen([str(GO_BINARY), "replicate", "--config", str(cfg)], stdout=log, stderr=log)
    try:
        run(publish(src, registrations(1)))
        wait_for(lambda: run(count(dst, "REG")) >= SENDERS, SLOW_S, "the Go replicator's first copies")
        wait_for(lambda: events(src).count("new") >= SENDERS, SLOW_S, "the Go replicator's new advisories")
        go.send_signal(signal.SIGTERM)  # it writes its state as it stops
        assert go.wait(30) is not None
    finally:
        if go.poll() is None:
            go.kill()
        log.close()
    assert state_file.is_file(), (tmp_path / "go.log").read_text()[-2000:]
    copies_by_go, advisories_by_go = run(count(dst, "REG")), events(src)
    assert copies_by_go == SENDERS and advisories_by_go == ["new"] * SENDERS

    ours = start_replicator(cfg)
    try:
        ours.wait_ready(SLOW_S)
        run(publish(src, registrations(2)))  # the next round, well within inspect_duration
        wait_handled(ours, src, "REG")
        assert f"starting from the {SENDERS} senders of Choria's sampler state" in ours.output()
    finally:
        assert ours.stop() == 0, ours.output()
    assert events(src) == advisories_by_go, "ours advised senders the Go replicator already knew"
    assert run(count(dst, "REG")) == copies_by_go, "ours copied senders the Go replicator copied a moment ago"
    # In the checkpoint now: the file never seeds another (a copy started again from scratch).
    assert not state_file.exists() and state_file.with_name(state_file.name + ".imported").is_file()
