"""What a heartbeat carries, as Choria's do."""

from __future__ import annotations

from datetime import timedelta

from replicator.config import HeartbeatConfig, HeartbeatSubject
from replicator.heartbeat import election_key, heartbeat_headers


def test_a_subjects_headers_win_over_the_shared_ones_and_the_choria_headers_name_host_and_subject() -> None:
    cfg = HeartbeatConfig(
        url="nats://127.0.0.1:4222",
        headers={"from": "dc1", "noop": "false"},
        subjects=[
            HeartbeatSubject(
                subject="example._monitor", interval=timedelta(seconds=20), headers={"noop": "true"}
            )
        ],
    )
    assert heartbeat_headers(cfg, cfg.subjects[0], "host-a") == {
        "from": "dc1",
        "noop": "true",
        "Choria-SR-Originator": "host-a",
        "Choria-SR-Subject": "example._monitor",
    }
    assert cfg.interval == timedelta(seconds=10)  # Choria's default
    assert election_key("dc1") == "SR_dc1_HB"
