"""What a heartbeat carries, as Choria's do."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from replicator.config import HeartbeatConfig, HeartbeatSubject
from replicator.heartbeat import Heartbeats, election_key, heartbeat_headers


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


def test_a_stop_ends_the_heartbeats_while_their_server_does_not_answer() -> None:
    """Their first connection was tried for ever: a stop then waited for the runner's 6 s bound
    ("stopping the heartbeats took 6.0 s") and left the attempt running."""
    cfg = HeartbeatConfig(url="nats://127.0.0.1:1", subjects=[HeartbeatSubject(subject="x._monitor")])
    beats = Heartbeats(cfg, "dc1", "host-a")

    async def stopped_while_connecting() -> bool:
        run = asyncio.ensure_future(beats.run())
        await asyncio.sleep(1.5)  # refused attempts under way
        beats.stop()
        done, _ = await asyncio.wait({run}, timeout=30)  # a bound for a hang, not a timing
        left = asyncio.all_tasks() - {asyncio.current_task()}  # the connection attempt among them
        return run in done and run.exception() is None and not left

    logging.disable(logging.WARNING)  # each refusal logged
    try:
        assert asyncio.run(stopped_while_connecting())
    finally:
        logging.disable(logging.NOTSET)


def test_a_stop_before_the_heartbeats_run_is_kept() -> None:
    """A stop asked for before the run had made its event was lost (found by a review): the
    run then went on until the runner's bound cut it off."""
    cfg = HeartbeatConfig(url="nats://127.0.0.1:1", subjects=[HeartbeatSubject(subject="x._monitor")])
    beats = Heartbeats(cfg, "dc1", "host-a")
    beats.stop()

    async def ends() -> bool:
        run = asyncio.ensure_future(beats.run())
        done, _ = await asyncio.wait({run}, timeout=30)  # a bound for a hang, not a timing
        return run in done and run.exception() is None

    logging.disable(logging.WARNING)
    try:
        assert asyncio.run(ends())
    finally:
        logging.disable(logging.NOTSET)
