"""The read lease of a leader-elected copy entry: the file that lets its query read.

A hot standby's query runs while it stands by and reads nothing. Taking over writes the lease:
the source sequence the target's copy ends at (`after`) and a `term` new at every takeover. Each
batch planned under a lease carries its term in its offset (Spark's offset log), and:

- a batch reads only while the lease it was planned under is still the one in force. A batch
  planned as the leader and read after the lease ended (the process stalled past the election's
  TTL, or was killed and restarted) reads nothing, so Spark commits its range unpublished;
- so the first batch planned under a new term starts right after the lease's `after`, wherever
  the checkpoint stands (but never before the configured start): every range an earlier term
  committed without publishing is read again (the target's copy decides, not the checkpoint),
  and what another instance copied is skipped. Where the takeover could not find the entry's
  last copy in the target (`after` None: a target with other writers, the copy deeper than the
  scan), reading continues from the checkpoint.

Without the term, the first batch after a takeover continued from the checkpoint when it stood
past the target's end, and the ranges committed unread were lost (issue 28, hole 1).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadLease:
    # The target's copy ends at this source sequence: reading continues after it. None: the
    # takeover did not find where (a target shared with other writers, the entry's last copy
    # deeper than its scan): reading continues from the checkpoint, as it stands.
    after: int | None
    term: str  # new at every takeover

    @property
    def first(self) -> int:
        """The first sequence this lease lets a batch read (0: any)."""
        return self.after + 1 if self.after is not None else 0


def read_lease(path: str) -> ReadLease | None:
    """The lease in force, or None while standing by."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    after = doc.get("after")
    return ReadLease(int(after) if after is not None else None, str(doc.get("term", "")))


def write_lease(path: str, after: int | None) -> ReadLease:
    """Take over: a new term, reading after source sequence `after`. Written atomically: the
    planner reads it from another process."""
    lease = ReadLease(after, uuid.uuid4().hex)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"after": lease.after, "term": lease.term}, f)
    os.replace(tmp, path)
    return lease


def batch_begin(lease: ReadLease, start: dict, configured_start: int = 0) -> int:
    """Where the next batch planned under `lease` begins, after the batch that ended at `start`;
    never before the query's configured start (its first offset: start_at_end, start_time,
    start_sequence)."""
    if start.get("term") != lease.term and lease.after is not None:
        # The first batch of this term: where the target's copy ends.
        return max(lease.after + 1, configured_start)
    return max(int(start["seq"]), lease.first, configured_start)


def batch_read_range(lease_file: str, first: int, end: int, term: str | None) -> tuple[int, int] | None:
    """The sequences [first, end) a batch planned under `term` reads now: all of them without
    an election (`lease_file` empty), none unless its lease is still in force with one."""
    if lease_file:
        lease = read_lease(lease_file)
        if lease is None or lease.term != term:
            return None
        first = max(first, lease.first)
    return first, end
