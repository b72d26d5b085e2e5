"""The record of a micro-batch whose publishing is still in flight.

The copy sink lets Spark commit a batch as soon as its publishing has started, so reading the
next batch overlaps publishing this one (measured in `make bench`). Spark's checkpoint then
says the batch is done before the target has acknowledged it; this record closes that gap.
It holds the source sequence range the batch publishes (filter_subject and max_age pick the
same messages from it again) and is removed once every message is acknowledged. If the process
dies first, the next start publishes the range again above the target's last copied sequence,
before the query resumes; the deterministic `Nats-Msg-Id` drops what had already arrived.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class InflightRange:
    first_seq: int
    last_seq: int
    # Published unchained (or turned so mid-way): the target may hold copies of the range after
    # a gap, so the next start looks for gaps below its last copy (a record written before this
    # was kept says so too).
    unchained: bool = True
    # When its publishing began (ns since the epoch): its copies were stored after it.
    since_ns: int = 0
    # The source stream's creation (µs since the epoch) it was read from; 0: not recorded (an
    # older version's record).
    source_created_us: int = 0


class InflightRecord:
    """`source_created_us`: the creation of the source stream this run reads (0: unknown),
    written into each record so that a record of an earlier stream of the same name is known."""

    def __init__(self, path: Path, source_created_us: int = 0) -> None:
        self.path = path
        self.source_created_us = source_created_us

    def write(self, first_seq: int, last_seq: int, unchained: bool = True, since_ns: int = 0) -> None:
        """Record a new range in flight. Never over one not yet cleared: its copies may be
        missing from the target, and only the next start's catch-up publishes it (a batch
        after a failed one, once a stop had taken the failure, replaced it and lost it)."""
        left = self.read()
        if left is not None:
            raise RuntimeError(
                f"source sequences {left.first_seq}-{left.last_seq} are still in flight: they are "
                "published again before anything after them (at the entry's next start)"
            )
        self._write(first_seq, last_seq, unchained, since_ns)

    def _write(self, first_seq: int, last_seq: int, unchained: bool, since_ns: int) -> None:
        doc = {
            "first_seq": first_seq,
            "last_seq": last_seq,
            "unchained": unchained,
            "since_ns": since_ns or time.time_ns(),
            "source_created_us": self.source_created_us,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.path)  # atomic: a reader sees the old record or the new one

    def mark_unchained(self) -> None:
        """The range in flight goes on unchained, or left a gap: the next start looks for gaps."""
        left = self.read()
        if left is not None and not left.unchained:
            self._write(left.first_seq, left.last_seq, True, left.since_ns)

    def read(self) -> InflightRange | None:
        try:
            doc = json.loads(self.path.read_text())
            # A record of an older version has no time: its file's is as late or later.
            since = int(doc.get("since_ns") or self.path.stat().st_mtime_ns)
            unchained = bool(doc.get("unchained", True))
            created = int(doc.get("source_created_us") or 0)
            return InflightRange(int(doc["first_seq"]), int(doc["last_seq"]), unchained, since, created)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as e:
            raise RuntimeError(
                f"in-flight batch record {self.path} is unreadable ({e}); remove it and the stream's "
                "checkpoint directory to copy the stream again from the target's last message"
            ) from None

    def of_another_stream(self, left: InflightRange) -> bool:
        """Whether `left` was read from an earlier source stream of the same name (deleted and
        created again since): its sequences are not this stream's."""
        return bool(left.source_created_us and self.source_created_us) and (
            left.source_created_us != self.source_created_us
        )

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
