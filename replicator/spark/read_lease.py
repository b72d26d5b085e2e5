"""The read lease of a leader-elected copy entry: the file that lets its query read.

A hot standby's query runs while it stands by and reads nothing. Taking over writes the lease:
the source sequence the target's copy ends at (`after`) and a `term` new at every takeover. Each
batch planned under a lease carries its term in its offset (Spark's offset log), and:

- a batch reads only while the lease it was planned under is still the one in force. A batch
  planned as the leader and read after the lease ended (the process stalled past the election's
  TTL, or was killed and restarted) reads nothing, so Spark commits its range unpublished;
- so the first batch planned under a new term starts right after the lease's `after`, wherever
  the checkpoint stands: every range an earlier term committed without publishing is read again
  (the target's copy decides, not the checkpoint), and what another instance copied is skipped.

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
    after: int  # the target's copy ends at this source sequence: reading continues after it
    term: str  # new at every takeover


def read_lease(path: str) -> ReadLease | None:
    """The lease in force, or None while standing by."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    return ReadLease(int(doc["after"]), str(doc.get("term", "")))


def write_lease(path: str, after: int) -> ReadLease:
    """Take over: a new term, reading after source sequence `after`. Written atomically: the
    planner reads it from another process."""
    lease = ReadLease(after, uuid.uuid4().hex)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"after": lease.after, "term": lease.term}, f)
    os.replace(tmp, path)
    return lease


def batch_begin(lease: ReadLease, start: dict) -> int:
    """Where the next batch planned under `lease` begins, after the batch that ended at `start`."""
    if start.get("term") != lease.term:
        return lease.after + 1  # the first batch of this term: where the target's copy ends
    return max(int(start["seq"]), lease.after + 1)


def batch_read_range(lease_file: str, first: int, end: int, term: str | None) -> tuple[int, int] | None:
    """The sequences [first, end) a batch planned under `term` reads now: all of them without
    an election (`lease_file` empty), none unless its lease is still in force with one."""
    if lease_file:
        lease = read_lease(lease_file)
        if lease is None or lease.term != term:
            return None
        first = max(first, lease.after + 1)
    return first, end
