"""The Choria Stream Replicator's (Go) sampler state file, read and written, so a sampled
stream switched between it and ours keeps its senders: no sender is advised `new` or copied
again because the other replicator ran before.

Go keeps one JSON file per stream entry, `<state_store>/<stream>_<name>.json`:
`{"Items": {"<sender>": {"seen": T, "copied": T, "advised": bool, "size": N}}}` with RFC 3339
times (nanoseconds, UTC; a zero time `0001-01-01T00:00:00Z` for "never"). `advised` is true
once a sender was advised `timeout`: our `warned`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from replicator.sampling import state
from replicator.sampling.extract import bucket_of
from replicator.sampling.rules import SenderTable


@dataclass(frozen=True)
class ChoriaSender:
    sender: str
    seen_ms: int
    copied_ms: int
    size: int
    advised: bool


class ChoriaStateError(ValueError):
    pass


def choria_state_file(state_store: str | Path, stream: str, name: str) -> Path:
    """Where Go keeps a stream entry's sampler state."""
    return Path(state_store) / f"{stream}_{name}.json"


# RFC 3339 with up to 9 fractional digits; Python reads at most 6.
_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def _ms(text: object, where: str) -> int:
    m = _TIME.match(text) if isinstance(text, str) else None
    if m is None:
        raise ChoriaStateError(f"{where}: {text!r} is not an RFC 3339 time")
    whole, fraction, zone = m.groups()
    t = datetime.fromisoformat(
        f"{whole}{'.' + (fraction or '0')[:6].ljust(6, '0')}{zone.replace('Z', '+00:00')}"
    )
    if t.year <= 1:
        return 0  # Go's zero time: never
    return int(t.timestamp() * 1000)


def _text(ms: int) -> str:
    if ms <= 0:
        return "0001-01-01T00:00:00Z"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_choria_state(path: Path) -> list[ChoriaSender]:
    """The senders of a Go state file; a file that is not one is a ChoriaStateError naming it."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ChoriaStateError(f"{path}: cannot read Choria's sampler state: {e}") from None
    items = doc.get("Items") if isinstance(doc, dict) else None
    if not isinstance(items, dict):
        raise ChoriaStateError(f'{path}: not Choria\'s sampler state (no "Items" object)')
    out = []
    for sender, item in items.items():
        where = f"{path}: Items[{sender!r}]"
        if not isinstance(item, dict):
            raise ChoriaStateError(f"{where}: not an object")
        size = item.get("size", 0)
        if not isinstance(size, int | float):
            raise ChoriaStateError(f"{where}.size: {size!r} is not a number")
        out.append(ChoriaSender(sender, _ms(item.get("seen"), f"{where}.seen"),
                                _ms(item.get("copied", "0001-01-01T00:00:00Z"), f"{where}.copied"), int(size),
                                bool(item.get("advised", False))))  # fmt: skip
    return out


def write_choria_state(path: Path, senders: Iterable[ChoriaSender]) -> None:
    """Write Go's state file (atomically: a temporary file renamed into place, as Go does)."""
    items: dict[str, dict[str, object]] = {}
    for s in senders:
        item: dict[str, object] = {"seen": _text(s.seen_ms), "copied": _text(s.copied_ms), "size": s.size}
        if s.advised:
            item["advised"] = True
        items[s.sender] = item
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".choria-state-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"Items": items}, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def seed_tables(senders: Iterable[ChoriaSender], buckets: int) -> dict[int, bytes]:
    """Each bucket's sender table (encoded as Spark's state holds it) for these senders."""
    by_bucket: dict[int, list[ChoriaSender]] = {}
    for s in senders:
        by_bucket.setdefault(bucket_of(s.sender, buckets), []).append(s)
    out = {}
    for bucket, group in by_bucket.items():
        table = SenderTable(
            keys=[s.sender for s in group],
            seen=np.array([s.seen_ms for s in group], np.int64),
            copied=np.array([s.copied_ms for s in group], np.int64),
            size=np.array([s.size for s in group], np.int64),
            warned=np.array([s.advised for s in group], bool),
        )
        out[bucket] = state.encode(table)
    return out
