"""The Choria-SR-Source header and deterministic message ids."""

from __future__ import annotations

from replicator.headers import format_source_header, message_id, parse_source_header


def test_source_header_round_trip() -> None:
    v = format_source_header("ORDERS", 42, "dc1", "nodes", 1700000000123)
    assert v == "ORDERS 42 dc1 nodes 1700000000123"
    mark = parse_source_header(v)
    assert mark is not None and (mark.stream, mark.sequence, mark.replicator, mark.config_name) == (
        "ORDERS",
        42,
        "dc1",
        "nodes",
    )
    assert parse_source_header("garbage") is None and parse_source_header(None) is None
    assert message_id("dc1.nodes.ORDERS.17", 5) == "dc1.nodes.ORDERS.17:5"
