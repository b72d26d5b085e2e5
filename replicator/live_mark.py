"""How far an entry's live copies reached: a floor the next start keeps to.

Copied live (replicator.live_copies), the target runs ahead of Spark's checkpoint: the query
records a batch at most once a second, and a backlog copied live leaves it further behind. A
start finds where the copies end from the target's tail, but that can miss them (another writer
stored 10,000 messages since, or the target dropped them by its limits): it would resume from
the checkpoint and, after the target's duplicate window, store those copies again. So the live
copies write here the highest source sequence the target has acknowledged, with what it was
acknowledged by: the source stream's and the target stream's creation, and the target's sequence
then. A start resumes after it only for the same two streams, a target not emptied and not
shorter than it was then: a target deleted, recreated or restored since gets what the
checkpoint says, as before.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class LiveMark:
    seq: int  # the highest source sequence the target acknowledged (or the entry skipped)
    source_created_us: int
    target_stream: str
    target_created_us: int
    target_seq: int = 0  # a target sequence known stored then (0: none known, never kept to)

    def holds_for(self, source_created_us: int, target_stream: str, target_info: object) -> bool:
        """Whether a start may keep to it: the same source stream, and the same target stream
        (name and creation; a restore keeps the creation, so also) holding messages and reaching
        at least the sequence it had then. A target whose limits removed all its messages does
        not hold: the start resumes from the checkpoint, as before marks."""
        state = getattr(target_info, "state", None)
        created = _created_us(target_info)
        return bool(
            self.source_created_us
            and self.source_created_us == source_created_us
            and self.target_created_us
            and self.target_created_us == created
            and self.target_stream == target_stream
            and self.target_seq > 0
            and state is not None
            and int(state.messages) > 0
            and int(state.last_seq) >= self.target_seq
        )


def _created_us(info: object) -> int:
    from replicator.nats.jetstream import created_us

    return created_us(info) if info is not None else 0


def write_live_mark(path: Path, mark: LiveMark) -> None:
    # A temporary file of its own: a live copier that outlived its stop may write beside another.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(asdict(mark)))
    os.replace(tmp, path)  # atomic: a reader sees the old mark or the new one


def read_live_mark(path: Path) -> LiveMark | None:
    """The mark, None when there is none or it is unreadable (a mark only ever lets a start
    skip what the target holds: without it, the start is as it was before marks)."""
    try:
        doc = json.loads(path.read_text())
        return LiveMark(
            seq=int(doc["seq"]),
            source_created_us=int(doc["source_created_us"]),
            target_stream=str(doc["target_stream"]),
            target_created_us=int(doc["target_created_us"]),
            target_seq=int(doc.get("target_seq") or 0),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
