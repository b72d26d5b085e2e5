"""How `admin election` and `admin advisories` print what the servers hold."""

from __future__ import annotations

import json

from replicator.admin_nats import ElectionState, format_election, parse_advisory
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
