"""The headers the replicator writes and reads: Choria-SR-Source and Nats-Msg-Id."""

from __future__ import annotations

from dataclasses import dataclass

SOURCE_HEADER = "Choria-SR-Source"
MSG_ID_HEADER = "Nats-Msg-Id"


@dataclass(frozen=True, slots=True)
class SourceMark:
    """A parsed Choria-SR-Source header: where a copied message came from."""

    stream: str
    sequence: int
    replicator: str
    config_name: str
    timestamp_ms: int


def format_source_header(stream: str, seq: int, replicator: str, config_name: str, ts_ms: int) -> str:
    """`<stream> <seq> <replicator name> <stream config name> <source ts ms>`."""
    return f"{stream} {seq} {replicator} {config_name} {ts_ms}"


def parse_source_header(value: str | None) -> SourceMark | None:
    """Parse a Choria-SR-Source value; None when absent or not in the expected form."""
    if not value:
        return None
    parts = value.split(" ")
    if len(parts) != 5:
        return None
    try:
        return SourceMark(parts[0], int(parts[1]), parts[2], parts[3], int(parts[4]))
    except ValueError:
        return None


def message_id(stream_identity: str, seq: int) -> str:
    """Deterministic Nats-Msg-Id: a replayed copy of the same source message gets the same id,
    so the target's duplicate window drops it."""
    return f"{stream_identity}:{seq}"
