"""What a lane publishes for each row: the copy's subject, payload and header lines, as the
ordered sink's copies carry them (the publishing itself is integration's)."""

from __future__ import annotations

import pyarrow as pa

from replicator.headers import MSG_ID_HEADER, SOURCE_HEADER, format_source_header, message_id
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
