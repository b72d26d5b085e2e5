"""What a sampled entry's failed publishes sent, until a replay has put it in the target.

A sampled batch publishes its copies inside the batch, so Spark commits it only once they are
all acknowledged, and replays a batch whose publish failed. An unchained publish (a target with
other writers) can fail at one copy while later ones are stored: the target's last copy then
lies past the one missing. The replay publishes what the target lacks of what was sent,
wherever it lies; this record (`unacked.json`, written only when a publish fails or a replay
moves on) lets the replay after a kill, or after a takeover, do so too, where it would go on
after the target's last copy and leave the missing copy out for good.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass
class Unacked:
    """Copies failed publishes sent, by source sequence (`seqs`, all above `floor`), from
    `since_ns` on: some may be in the target with their acks lost, some missing below copies
    it holds. Every sent copy at or below `floor` is in the target (acknowledged)."""

    seqs: set[int]
    since_ns: int
    floor: int = 0
    # Whether the sink's own floor still vouches for these copies (everything at or below it in
    # the target): true in the process whose publish failed, false once a takeover moved it to
    # the target's last copy or the record was read back from disk.
    sink_floor_vouches: bool = True
    held: dict[int, int] | None = field(default=None, compare=False)  # held by the target, once read

    def after_failure(self, sent: set[int], sink_floor: int, started_ns: int) -> Unacked | None:
        """This record with what a publish that failed now sent added; `sink_floor`: the sink's
        floor after it (the acks' prefix moved it). What the target holds is read again."""
        floor = max(self.floor, sink_floor) if self.sink_floor_vouches else self.floor
        # A sent copy not in the record and at or below the sink's floor was not published
        # (the floor left it out) or was acknowledged.
        fresh = {s for s in sent if s > sink_floor}
        seqs = {s for s in self.seqs | fresh if s > floor}
        return Unacked(seqs, min(self.since_ns, started_ns), floor, self.sink_floor_vouches) if seqs else None

    def settled_up_to(self, seq: int) -> Unacked | None:
        """This record once every copy it names up to `seq` is in the target (a replayed part
        published, a batch committed): None when nothing is left."""
        if seq <= self.floor:
            return self
        rest = {s for s in self.seqs if s > seq}
        return replace(self, seqs=rest, floor=seq) if rest else None

    def names_the_same(self, other: Unacked) -> bool:
        return (self.seqs, self.since_ns, self.floor) == (other.seqs, other.since_ns, other.floor)

    def merged(self, other: Unacked) -> Unacked:
        """Two records of one entry (this process's and one read from disk, written by an
        instance that led before): what either names, vouched for only as far as both are."""
        if self.names_the_same(other):
            return self
        floor = min(self.floor, other.floor)
        seqs = {s for s in self.seqs | other.seqs if s > floor}
        return Unacked(seqs, min(self.since_ns, other.since_ns), floor, sink_floor_vouches=False)


def first_failure(sent: set[int], sink_floor: int, started_ns: int) -> Unacked | None:
    """The record of a publish that failed with none before it (None: it sent nothing the
    sink's floor does not cover)."""
    seqs = {s for s in sent if s > sink_floor}
    return Unacked(seqs, started_ns, sink_floor) if seqs else None


@dataclass
class RecordRead:
    """What `UnackedRecord.read` found: the record, or why one on disk was not this entry's."""

    unacked: Unacked | None
    dropped: str = ""


class UnackedRecord:
    """The on-disk form. `source_created_us`: the creation of the source stream this run reads
    (0: unknown); a record of an earlier stream of the same name, or of another target stream,
    is not this entry's."""

    def __init__(self, path: Path, target_stream: str, source_created_us: int = 0) -> None:
        self.path = path
        self.target_stream = target_stream
        self.source_created_us = source_created_us
        self._last: dict[str, object] | None = None  # what this process last wrote or read

    def write(self, u: Unacked) -> None:
        doc: dict[str, object] = {
            "seqs": sorted(u.seqs),
            "since_ns": u.since_ns,
            "floor": u.floor,
            "target_stream": self.target_stream,
            "source_created_us": self.source_created_us,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.path)  # atomic: a reader sees the old record or the new one
        self._last = doc

    def read(self) -> RecordRead:
        try:
            doc = json.loads(self.path.read_text())
            seqs = {int(s) for s in doc["seqs"]}
            since_ns, floor = int(doc["since_ns"]), int(doc["floor"])
            created, target = int(doc.get("source_created_us") or 0), str(doc["target_stream"])
        except FileNotFoundError:
            return RecordRead(None)
        except (ValueError, KeyError, TypeError) as e:
            raise RuntimeError(
                f"record of failed publishes {self.path} is unreadable ({e}); remove it (a copy a failed "
                "unchained publish left missing below the target's last copy is then not published again)"
            ) from None
        self._last = doc
        if created and self.source_created_us and created != self.source_created_us:
            return RecordRead(None, "it was written for an earlier source stream of this name, deleted since")
        if target != self.target_stream:
            return RecordRead(None, f"it was written for target stream {target}, not {self.target_stream}")
        if not seqs:
            return RecordRead(None)
        return RecordRead(Unacked(seqs, since_ns, floor, sink_floor_vouches=False))

    def clear(self) -> None:
        """Remove the record, unless another instance wrote it since this one last did or read it."""
        try:
            now = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return  # unreadable: the next read says so
        if now == self._last:
            self.path.unlink(missing_ok=True)
        self._last = None
