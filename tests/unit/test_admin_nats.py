"""How `admin election` and `admin advisories` print what the servers hold."""

from __future__ import annotations

import asyncio
import json

import pytest

from replicator.admin_nats import ElectionState, admin_connection, format_election, parse_advisory
from replicator.sampling.rules import PROTOCOL


def test_election_lines_name_the_leader_its_last_renewal_and_a_missing_bucket() -> None:
    lines = list(
        format_election([
            ElectionState("REG/dc1", "SR_dc1_REG", "host-a", "host-b", 0.42, 17, 10.0),
            ElectionState("REG/dc2", "SR_dc2_REG", "host-a", "host-a", 1.0, 3, 10.0),
            ElectionState("REG/dc3", "SR_dc3_REG", "host-a", None, ttl_s=10.0),
            ElectionState("ORDERS/o", "-", "", None, problem="not leader-elected (no leader_election_name)"),
        ])
    )  # fmt: skip
    assert "led by host-b, renewed 0.4 s ago (revision 17, TTL 10 s)" in lines[0]
    assert "led by host-a (this config's candidate)" in lines[1]
    assert "no leader" in lines[2]
    assert lines[3].endswith("not leader-elected (no leader_election_name)")


def test_stored_advisories_print_as_the_go_original_does_and_other_messages_are_passed_over() -> None:
    doc = {"protocol": PROTOCOL, "event_id": "x", "inspect_field": "sender", "age": 662, "seen": 1673441497,
           "replicator": "US_EAST_1", "timestamp": 1673441559, "event": "timeout", "value": "node1.example.net"}  # fmt: skip
    adv = parse_advisory(json.dumps(doc).encode())
    assert adv is not None
    assert adv.line() == "[2023-01-11 12:52:39] timeout node1.example.net seen 11m2s earlier on US_EAST_1"
    assert parse_advisory(b"not json") is None
    assert parse_advisory(b'{"protocol": "io.choria.other"}') is None
    assert parse_advisory(json.dumps({**doc, "timestamp": "soon"}).encode()) is None


def test_an_admin_command_says_in_one_line_that_no_server_answers_instead_of_waiting_for_ever() -> None:
    """`admin advisories` and `admin election` retried the first connect for ever, printing the
    same error every 30 s (found by a review): nats-py takes max_reconnect_attempts=0 as no limit.
    Nothing listens on port 1; the wait_for only turns a regression into a failure."""
    with pytest.raises(RuntimeError) as failed:
        asyncio.run(asyncio.wait_for(admin_connection("nats://127.0.0.1:1", None, "sr-test"), 120))
    assert str(failed.value) == "cannot reach a NATS server at nats://127.0.0.1:1: start it, or give its URL"
