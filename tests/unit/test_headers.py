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


def test_the_replicators_own_headers_and_the_sources_publish_conditions_are_not_copied() -> None:
    from replicator.headers import is_copied

    assert is_copied("X-Anything") and is_copied("Nats-Rollup") is True
    assert not is_copied("Choria-SR-Source") and not is_copied("Nats-Msg-Id")
    for name in ("Nats-Expected-Stream", "Nats-Expected-Last-Sequence", "Nats-Expected-Last-Msg-Id"):
        assert not is_copied(name)
    # The server's record of a sourced message: a publish carrying it is refused.
    assert not is_copied("Nats-Stream-Source")
    # The atomic batch a message was stored in: on a copy, a batch of the target's own.
    for name in ("Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit"):
        assert not is_copied(name)


def test_an_elected_entrys_copies_are_its_instances_whatever_their_names_and_no_other_fleets() -> None:
    from replicator.headers import CopyOwner, SourceMark

    def mark(replicator: str, config: str = "nodes") -> SourceMark:
        return SourceMark("REG", 7, replicator, config, 0)

    ours = CopyOwner("REG", "dc1-host-b", "nodes", elected_identity="SR_nodes_REG.1795000000123456")
    # Another instance of the same election (its own top-level name): its Nats-Msg-Id says so.
    assert ours.owns(mark("dc1-host-a"), "SR_nodes_REG.1795000000123456:7")
    # A Go instance of the election with our name; and our own copies.
    assert ours.owns(mark("dc1-host-b"), "whatever-go-writes")
    # Another source cluster's fleet, same entry name and stream, elected on its own cluster.
    assert not ours.owns(mark("city2-host-a"), "SR_nodes_REG.1795000000999999:7")
    assert not ours.owns(mark("dc1-host-a", "other"), "SR_nodes_REG.1795000000123456:7")
    assert not ours.owns(None, "SR_nodes_REG.1795000000123456:7")
    unelected = CopyOwner("REG", "dc1", "nodes")
    assert unelected.owns(mark("dc1"), "") and not unelected.owns(mark("dc1-host-a"), "dc1-host-a.x:7")


def test_a_copy_of_a_recreated_source_streams_earlier_life_is_not_the_entrys() -> None:
    # The source stream was deleted and created again (same name): the target's copies of the
    # old one say nothing of what the new one's copies need (review of issue 28: the floor
    # jumped to the old stream's last copy and the new one's first messages were skipped).
    from replicator.headers import CopyOwner, SourceMark, message_id

    mark = SourceMark("REG", 2998, "dc1", "nodes", 0)
    now = CopyOwner("REG", "dc1", "nodes", incarnation="dc1.nodes.REG.1795000200")
    assert now.owns(mark, message_id("dc1.nodes.REG.1795000200", 2998))
    assert not now.owns(mark, message_id("dc1.nodes.REG.1795000100", 2998))
    assert now.owns(mark, "whatever-go-writes")  # the Go original's copies, by its Choria-SR-Source
    assert now.owns(mark, None)
    elected = CopyOwner(
        "REG", "dc1-b", "nodes", "SR_nodes_REG.1795000200000000", "SR_nodes_REG.1795000200000000"
    )
    assert elected.owns(SourceMark("REG", 5, "dc1-a", "nodes", 0), "SR_nodes_REG.1795000200000000:5")
    assert not elected.owns(SourceMark("REG", 5, "dc1-b", "nodes", 0), "SR_nodes_REG.1795000100000000:5")
