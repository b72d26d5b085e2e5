"""What a sampled entry's failed publishes sent, kept on disk until a replay has gone past it.

A sampled batch publishes its copies inside the batch, so Spark commits it only once they are
all acknowledged; a batch whose publish failed is replayed. An unchained publish (a target
with other writers) can fail at one copy while later ones are stored, and the target's last
copy then lies past the one missing. The replay checks what the publishes sent against the
target and publishes what it lacks, wherever it lies; this record lets a replay after a kill
(the next start's) do that too, where it would otherwise go on after the target's last copy
and leave the missing one out for good. Written only when a publish fails.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Unacked:
    """Copies publishes that failed sent (their source sequences, from `since_ns` on): some may
    be in the target with their acks lost, some missing below copies it holds."""

    seqs: set[int]
    since_ns: int
    held: dict[int, int] | None = None  # those the target holds (their target sequences), once read
    # Read back at a start: the floor (the target's last copy) does not vouch for what is below it.
    restored: bool = False


class UnackedRecord:
    """`source_created_us`: the creation of the source stream this run reads (0: unknown); a
    record of an earlier stream of the same name is not this stream's."""

    def __init__(self, path: Path, source_created_us: int = 0) -> None:
        self.path = path
        self.source_created_us = source_created_us

    def write(self, u: Unacked) -> None:
        doc = {"seqs": sorted(u.seqs), "since_ns": u.since_ns, "source_created_us": self.source_created_us}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.path)  # atomic: a reader sees the old record or the new one

    def read(self) -> Unacked | None:
        """The record left by an earlier run; None when there is none, or it is of another
        stream of the same name (deleted and created again since)."""
        try:
            doc = json.loads(self.path.read_text())
            seqs = {int(s) for s in doc["seqs"]}
            since_ns, created = int(doc["since_ns"]), int(doc.get("source_created_us") or 0)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as e:
            raise RuntimeError(
                f"record of failed publishes {self.path} is unreadable ({e}); remove it (copies a failed "
                "unchained publish left missing below the target's last copy are then not published again)"
            ) from None
        if created and self.source_created_us and created != self.source_created_us:
            return None
        return Unacked(seqs, since_ns, restored=True) if seqs else None

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
