"""What a lane publishes for each row: the copy's subject, payload and header lines, as the
ordered sink's copies carry them (the publishing itself is integration's)."""

from __future__ import annotations

import pyarrow as pa

from replicator.headers import MSG_ID_HEADER, SOURCE_HEADER, format_source_header, message_id
from replicator.nats import wire
from replicator.nats.readers import RawMessage
from replicator.spark.lanes import lane_messages
from replicator.spark.rows import to_record_batch
from replicator.spark.sink import SinkSettings

SETTINGS = SinkSettings(
    target_url="nats://127.0.0.1:1",
    target_stream="COPY",
    source_stream="ORDERS",
    replicator="dc1",
    config_name="lanes",
    stream_identity="dc1.lanes.ORDERS.1700000000",
    subject_prefix="central",
    subject_remove="orders",
)


def test_a_lane_copy_carries_the_source_mark_a_deduplicating_id_and_the_rewritten_subject() -> None:
    msgs = [
        RawMessage(7, "orders.eu.1", 1_700_000_000_123_000_000, [("Trace", "abc")], b"one"),
        RawMessage(9, "orders.us.2", 1_700_000_001_000_000_000, None, b"two"),
    ]
    out = list(lane_messages(pa.Table.from_batches([to_record_batch("ORDERS", msgs)]), SETTINGS))
    assert [(subject, data) for subject, data, _ in out] == [
        ("central.eu.1", b"one"),
        ("central.us.2", b"two"),
    ]
    first, second = (lines.decode() for _, _, lines in out)
    source = format_source_header("ORDERS", 7, "dc1", "lanes", 1_700_000_000_123)
    assert first == (
        f"Trace: abc\r\n{SOURCE_HEADER}: {source}\r\n{MSG_ID_HEADER}: {message_id(SETTINGS.stream_identity, 7)}\r\n"
    )
    assert second.startswith(f"{SOURCE_HEADER}: ") and message_id(SETTINGS.stream_identity, 9) in second


def test_a_lane_copy_keeps_header_values_that_are_not_utf8_byte_for_byte() -> None:
    """Spark's strings are UTF-8: such a value reads as U+FFFD in the row's `headers`, and its
    copy is made from `header_bytes`, the bytes the source stored."""
    block = b"NATS/1.0\r\nX-Latin1: caf\xe9\r\nX-Ok: d\xc3\xa9j\xc3\xa0\r\nX-Latin1: \xff\r\n\r\n"
    msgs = [
        RawMessage(7, "orders.eu.1", 1_700_000_000_123_000_000, wire.parse_headers(block), b"one"),
        RawMessage(8, "orders.eu.2", 1_700_000_000_124_000_000, [("X-Ok", "déjà")], b"two"),
        RawMessage(9, "orders.eu.3", 1_700_000_000_125_000_000, None, b"three"),
    ]
    table = pa.Table.from_batches([to_record_batch("ORDERS", msgs)])
    assert table.column("headers").to_pylist() == [
        [("X-Latin1", "caf\ufffd"), ("X-Ok", "déjà"), ("X-Latin1", "\ufffd")],
        [("X-Ok", "déjà")],
        None,
    ]
    assert table.column("header_bytes").to_pylist() == [
        [("X-Latin1", b"caf\xe9"), ("X-Ok", "déjà".encode()), ("X-Latin1", b"\xff")],
        None,
        None,
    ]
    first, second, third = (lines for _, _, lines in lane_messages(table, SETTINGS))
    assert first.startswith(b"X-Latin1: caf\xe9\r\nX-Ok: d\xc3\xa9j\xc3\xa0\r\nX-Latin1: \xff\r\n")
    assert second.startswith("X-Ok: déjà\r\n".encode())
    assert third.startswith(f"{SOURCE_HEADER}: ".encode())


def test_a_lane_copy_keeps_a_subject_that_is_not_utf8_byte_for_byte() -> None:
    """Such a subject reads as U+FFFD in the row's `subject`; its copy goes to the subject the
    source stored, from `subject_bytes` (rewritten as any other)."""
    subject = wire.wire_text(b"orders.caf\xe9.1")
    msgs = [
        RawMessage(7, subject, 1_700_000_000_123_000_000, None, b"one"),
        RawMessage(8, "orders.eu.2", 1_700_000_000_124_000_000, None, b"two"),
    ]
    table = pa.Table.from_batches([to_record_batch("ORDERS", msgs)])
    assert table.column("subject").to_pylist() == ["orders.caf\ufffd.1", "orders.eu.2"]
    assert table.column("subject_bytes").to_pylist() == [b"orders.caf\xe9.1", None]
    out = list(lane_messages(table, SETTINGS))
    assert [wire.wire_bytes(subject) for subject, _, _ in out] == [b"central.caf\xe9.1", b"central.eu.2"]
    assert wire.hpub(out[0][0], "_INBOX.x", b"", b"one").startswith(b"HPUB central.caf\xe9.1 _INBOX.x ")
