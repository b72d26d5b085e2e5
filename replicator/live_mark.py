"""How far an entry's live copies reached: a floor the next start keeps to.

Copied live (replicator.live_copies), the target runs ahead of Spark's checkpoint: the query
records a batch at most once a second, and a backlog copied live leaves it further behind. A
start finds where the copies end from the target's tail, but that can miss them (another writer
stored 10,000 messages since, or the target dropped them by its limits): it would resume from
the checkpoint and, after the target's duplicate window, store those copies again. So the live
copies write here the highest source sequence the target has acknowledged, with what it was
acknowledged by: the source stream's and the target stream's creation, and where one of our
copies was stored then (its target and source sequences). A start resumes after it only for the
same two streams, a target not emptied that still holds that copy there (the caller reads it):
a target deleted, recreated or restored since without it gets what the checkpoint says, as
before, even when other writers have since taken its sequence past the mark's. A restore
through the server's API of a 2.15 backup gives the stream a new creation time; other restores
may keep it, and then the copy's absence tells.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

# The mark is written at most this often while copies are acknowledged.
MARK_EVERY_S = 0.2


@dataclass(frozen=True)
class LiveMark:
    seq: int  # the highest source sequence the target acknowledged (or the entry skipped)
    source_created_us: int
    target_stream: str
    target_created_us: int
    target_seq: int = 0  # where one of our copies was stored then (0: none known, never kept to)
    copy_seq: int = 0  # that copy's source sequence (0: a mark of an earlier version, never kept to)

    def not_kept_because(self, source_created_us: int, target_stream: str, target_info: object) -> str:
        """Why a start may not keep to it, as far as the streams' info says ("": it may): it
        needs the same source stream, and the same target stream (name and creation) holding
        messages and reaching at least the sequence of the copy named. A target whose limits
        removed all its messages does not hold. A restore through the server's API of a backup
        nats-server 2.15 made gives the stream a new creation time; a restore of an older
        backup's format, or of the server's files, may keep it: so the caller then checks that
        the copy named is still there."""
        state = getattr(target_info, "state", None)
        created = _created_us(target_info)
        if not (self.target_seq and self.copy_seq):
            return "it names none of our copies (written by a version before 2026-12-06)"
        if not (self.source_created_us and source_created_us):
            return "the source stream's creation time is not known"
        if self.source_created_us != source_created_us:
            return "the source stream was created again since"
        if self.target_stream != target_stream:
            return f"it is for target stream {self.target_stream}, the entry copies to {target_stream} now"
        if state is None:
            return "the target stream's info was not read"
        if not (self.target_created_us and created):
            return "the target stream's creation time is not known"
        if self.target_created_us != created:
            return "the target stream was created again or restored from a backup since (its creation time changed)"
        if int(state.messages) == 0:
            return "the target stream holds no messages now"
        if int(state.last_seq) < self.target_seq:
            return f"the target stream ends at sequence {state.last_seq} now, before the mark's {self.target_seq}"
        return ""


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
            copy_seq=int(doc.get("copy_seq") or 0),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


class MarkPacer:
    """Writes an entry's mark (`write`: the sequence written, 0 for none) once the target's
    acknowledged copies (`floor`) moved past the last one written, at most every MARK_EVERY_S
    unless forced. A write that fails is reported (`failed`) once until one succeeds: the copies
    go on, and a start without the mark resumes as it did before marks."""

    def __init__(
        self, floor: Callable[[], int], write: Callable[[], int], failed: Callable[[Exception], None]
    ) -> None:
        self._floor, self._write, self._failed = floor, write, failed
        self._marked = 0  # the floor last written
        self._marked_at = 0.0
        self._failing = False

    def note(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._floor() <= self._marked or (not force and now - self._marked_at < MARK_EVERY_S):
            return
        try:
            self._marked = max(self._marked, self._write())
        except Exception as e:  # a full disk, say: never an end to the copies
            if not self._failing:
                self._failed(e)
            self._failing = True
            return
        self._marked_at, self._failing = now, False
