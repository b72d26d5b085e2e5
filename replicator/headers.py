"""The headers the replicator writes and reads: Choria-SR-Source and Nats-Msg-Id."""

from __future__ import annotations

from dataclasses import dataclass

SOURCE_HEADER = "Choria-SR-Source"
MSG_ID_HEADER = "Nats-Msg-Id"
# Set on chained copies (`chain_copies`): the copy before it, by its Nats-Msg-Id (or on a
# clustered target the sequence it got), so the target refuses a copy that would land after a
# gap (replicator.spark.sink).
EXPECTED_LAST_MSG_ID_HEADER = "Nats-Expected-Last-Msg-Id"
EXPECTED_LAST_SEQUENCE_HEADER = "Nats-Expected-Last-Sequence"
# Headers that told the source's server how to store a message (Nats-Expected-Stream, -Last-
# Sequence, -Last-Msg-Id, ...). They were satisfied when it was stored; on a copy they would make
# the target refuse it, so they are not copied.
_PUBLISH_CONDITION_PREFIX = "Nats-Expected-"
# Kept on a message stored by an atomic batch (ADR-50: Nats-Batch-Id, -Sequence, -Commit). On a
# copy they would make the target take it as part of a batch of its own, refused where the
# stream does not allow atomic batches ("atomic publish is disabled", code 10174: the entry was
# held at that copy for ever). The server drops them too when a stream sources another.
_ATOMIC_BATCH_PREFIX = "Nats-Batch-"
# Set by the server on a message a stream sourced from another: a publish that carries it is
# refused (code 10227, "message stream source header is not allowed"), so a source stream that
# sources others could not be copied. Where a copy came from is in its Choria-SR-Source.
STREAM_SOURCE_HEADER = "Nats-Stream-Source"
_REPLACED = frozenset({SOURCE_HEADER, MSG_ID_HEADER, STREAM_SOURCE_HEADER})


def is_copied(name: str) -> bool:
    """Whether a source message's header goes onto its copy (the replicator sets its own
    Choria-SR-Source and Nats-Msg-Id, and drops the source's publish conditions, the atomic
    batch it was stored in and the server's record of sourcing)."""
    return (
        name not in _REPLACED
        and not name.startswith(_PUBLISH_CONDITION_PREFIX)
        and not name.startswith(_ATOMIC_BATCH_PREFIX)
    )


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


@dataclass(frozen=True, slots=True)
class CopyOwner:
    """Which copies in a target are a stream entry's own: those whose Choria-SR-Source names
    its source stream and config name, and this replicator. A leader-elected entry's instances
    may each have their own top-level name (a fleet that templates it from the host name): its
    copies are also those whose Nats-Msg-Id carries its identity (`elected_identity`: the
    election key and the source stream's creation, the same from every instance, and another
    source cluster's fleet with the same entry name has another)."""

    source_stream: str
    replicator: str
    config_name: str
    elected_identity: str = ""
    # What this entry's Nats-Msg-Ids are made of now (message_id), ending in the source stream's
    # creation: a copy whose id has the same beginning and another creation is of a deleted and
    # recreated source stream, and vouches for nothing in this one.
    incarnation: str = ""

    def owns(self, mark: SourceMark | None, msg_id: str | None) -> bool:
        if mark is None or (mark.stream, mark.config_name) != (self.source_stream, self.config_name):
            return False
        if self.incarnation and msg_id and ":" in msg_id:
            made_of = msg_id.rpartition(":")[0]
            if (
                made_of != self.incarnation
                and made_of.rpartition(".")[0] == self.incarnation.rpartition(".")[0]
            ):
                return False
        if mark.replicator == self.replicator:
            return True
        return bool(self.elected_identity) and (msg_id or "").startswith(f"{self.elected_identity}:")
