"""How far an entry's live copies reached: a floor the next start keeps to.

Copied live (replicator.live_copies), the target runs ahead of Spark's checkpoint: the query
records a batch at most once a second, and a backlog copied live leaves it further behind. A
start finds where the copies end from the target's tail, but that can miss them (another writer
stored 10,000 messages since, or the target dropped them by its limits): it would resume from
the checkpoint and, after the target's duplicate window, store those copies again. So the live
copies write here the highest source sequence the target has acknowledged (every few tenths of
a second, and as they stop), with the source stream's creation; a start of the same stream
resumes after it (never publishing at or below it), as it does after the target's last copy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_live_mark(path: Path, seq: int, source_created_us: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"seq": seq, "source_created_us": source_created_us}))
    os.replace(tmp, path)  # atomic: a reader sees the old mark or the new one


def read_live_mark(path: Path, source_created_us: int) -> int:
    """The mark's sequence, 0 when there is none or it is of another source stream (deleted and
    created again since) or unreadable (a mark only ever lets a start skip what it holds)."""
    try:
        doc = json.loads(path.read_text())
        seq, created = int(doc["seq"]), int(doc.get("source_created_us") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    if not created or not source_created_us or created != source_created_us:
        return 0
    return max(seq, 0)
