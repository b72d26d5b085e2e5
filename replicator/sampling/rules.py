"""The sampling rules and the advisory state machine, in event time. Pure: no NATS, no Spark.

Per sender: last seen, last copied, last size, whether a timeout was advised. A message at time
t (its JetStream timestamp) of size z from a sender is copied when the sender is unknown (then
advised `new`), when the force field is JSON true, when |z - last size| >= size_trigger > 0, or
when t - last copied >= inspect_duration x (1 - 0.1 h), h a stable hash of the sender in
[0, 1). Advisories are exact in event time: a sender unseen for warn_duration is advised
`timeout` at last seen + warn, one unseen for inspect_duration `expire` at last seen + inspect
(and forgotten); seen again after a timeout but before expiring, it is advised `recover`.

`SenderTable.process` works on one bucket of senders for one batch; batching and bucketing do
not change its results (tests/unit/sampling/test_rules.py checks it against `reference.py`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

import numpy as np
import orjson

from replicator.subjects import subject_tokens

PROTOCOL = "io.choria.sr.v2.age_advisory"
KSUID_EPOCH = 1_400_000_000
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_B62_2, _B62_4 = 62**2, 62**4
_B62_PAIRS = [a + b for a in _B62 for b in _B62]  # every two-digit string, by its value


class Event(StrEnum):
    """What an advisory says about a sender (the `event` of io.choria.sr.v2.age_advisory)."""

    NEW = "new"
    TIMEOUT = "timeout"
    RECOVER = "recover"
    EXPIRE = "expire"


@dataclass(frozen=True)
class SamplingParams:
    inspect_ms: int
    warn_ms: int
    size_trigger: float = 0.0
    stream: str = ""
    replicator: str = ""
    inspect_label: str = ""
    """What identifies a sender, for the advisory's `inspect_field` (e.g. `sender`)."""
    advisory_subject: str = ""
    """Where advisories are published (`%s`: the event, `%v`: the sender); "" publishes none."""
    advisory_reliable: bool = False
    """Advisories as JetStream publishes, acknowledged, instead of core NATS messages."""
    drop_late: bool = False
    """A sender found silent for twice inspect_ms or more (its expiry found late: the replicator
    was down) is forgotten without a timeout or expire advisory, near what Choria's replicator
    does with old state it loads (docs/configuration.md); by default it is advised at the event
    times it fell due."""


@dataclass(frozen=True)
class Message:
    seq: int
    sender: str | None
    ts_ms: int
    size: int
    force: bool = False


@dataclass(frozen=True)
class Advisory:
    event: Event
    sender: str
    event_ms: int
    seen_ms: int
    seq: int = -1
    """The message that caused it (new, recover, or the timeout/expire found on a message's
    arrival); -1 for one found when the clock moved."""

    def event_id(self, stream: str) -> str:
        return ksuid(self.event_ms // 1000, f"{stream}\x00{self.sender}\x00{self.event}\x00{self.event_ms}")

    def subject(self, template: str) -> str:
        # The payload's `value` keeps the sender as it is; the subject takes a safe form of it.
        return template.replace("%s", self.event).replace("%v", subject_tokens(self.sender))

    def payload(self, p: SamplingParams, event_id: str | None = None) -> bytes:
        """The advisory's JSON; `event_id` if the caller computed it already (for its header).
        orjson: a tenth of json.dumps's time, a share of every new sender's cost."""
        return orjson.dumps(
            {
                "protocol": PROTOCOL,
                "event_id": event_id if event_id is not None else self.event_id(p.stream),
                "inspect_field": p.inspect_label,
                "age": (self.event_ms - self.seen_ms) // 1000,
                "seen": self.seen_ms // 1000,
                "replicator": p.replicator,
                "timestamp": self.event_ms // 1000,
                "event": self.event,
                "value": self.sender,
            }
        )


def ksuid(unix_seconds: int, key: str) -> str:
    """A KSUID (27 base62 chars: 4 bytes of seconds since 2014-05-13, 16 payload bytes) whose
    payload is a hash of `key`: sortable by time, and the same for the same event."""
    raw = (
        max(0, unix_seconds - KSUID_EPOCH).to_bytes(4, "big")
        + hashlib.blake2b(key.encode(), digest_size=16).digest()
    )
    # Four digits per division of the 160-bit number (then small ints and a table of digit
    # pairs), not one: fewer big-int divisions for every advisory.
    n = int.from_bytes(raw, "big")
    chunks = []
    for _ in range(6):  # the 24 low digits
        n, r = divmod(n, _B62_4)
        hi, lo = divmod(r, _B62_2)
        chunks.append(_B62_PAIRS[hi] + _B62_PAIRS[lo])
    hi, lo = divmod(n, _B62_2)  # the top 3 (n < 62**3)
    chunks.append(_B62_PAIRS[hi][1] + _B62_PAIRS[lo])
    return "".join(reversed(chunks))


def splay(sender: str) -> float:
    """h in [0, 1): a stable hash of the sender, spreading copies like Choria's random 10 %."""
    return int.from_bytes(hashlib.blake2b(sender.encode(), digest_size=8).digest(), "big") / 2**64


def copy_interval_ms(p: SamplingParams, sender: str) -> float:
    return p.inspect_ms * (1 - 0.1 * splay(sender))


FLEET_HISTORY_MS = 3_600_000
"""How long a sender gone from the table is remembered (for `admin fleet` only)."""


class SenderRow(NamedTuple):
    sender: str
    seen_ms: int
    copied_ms: int
    size: int
    warned: bool
    first_ms: int  # 0: not known (imported, or tracked before first-seen times were kept)
    recovered_ms: int  # 0: never recovered from a timeout (or before this was kept)


@dataclass
class SenderTable:
    """One bucket's senders: numpy columns plus a name -> row index."""

    keys: list[str] = field(default_factory=list)
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    copied: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    size: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    warned: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    clock_ms: int = 0
    first: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """When each sender was first seen (0: not known, e.g. imported or written before this column)."""
    recovered: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """When each sender last recovered from a timeout (0: never, or not known)."""
    expired: dict[str, int] = field(default_factory=dict)
    """Senders gone from the table (expired, or forgotten late) in the last FLEET_HISTORY_MS of
    the clock -> when: kept only so that `admin fleet` can list them."""
    index: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.index and self.keys:
            self.index = {k: i for i, k in enumerate(self.keys)}
        if len(self.first) != len(self.seen):
            self.first = np.zeros(len(self.seen), np.int64)
        if len(self.recovered) != len(self.seen):
            self.recovered = np.zeros(len(self.seen), np.int64)

    def __len__(self) -> int:
        return len(self.index)

    def rows(self) -> Iterable[SenderRow]:
        for k, i in self.index.items():
            yield SenderRow(k, int(self.seen[i]), int(self.copied[i]), int(self.size[i]), bool(self.warned[i]),
                            int(self.first[i]), int(self.recovered[i]))  # fmt: skip

    def _gone(self, sender: str, when_ms: int) -> None:
        self.expired[sender] = when_ms

    # --- the rules -------------------------------------------------------------------------------
    def process(
        self, msgs: Iterable[Message], clock_ms: int, p: SamplingParams
    ) -> tuple[list[bool], list[Advisory]]:
        """Decide each message (in sequence order), then move the clock to `clock_ms` and advise
        senders that went silent. Returns (copy flag per message, advisories in event order per
        sender)."""
        copies: list[bool] = []
        advs: list[Advisory] = []
        index, seen, copied, size, warned = self.index, self.seen, self.copied, self.size, self.warned
        new_keys: list[str] = []
        new_rows: list[
            list[int]
        ] = []  # seen, copied, size, warned, first, recovered: senders added this batch
        removed = False
        for m in msgs:
            s = m.sender
            if s is None:
                copies.append(True)  # nothing to sample on: always copied
                continue
            i = index.get(s)
            if i is not None:
                row = new_rows[i - len(seen)] if i >= len(seen) else None
                last_seen = row[0] if row else int(seen[i])
                was_warned = bool(row[3]) if row else bool(warned[i])
                gap = m.ts_ms - last_seen
                if p.drop_late and gap >= 2 * p.inspect_ms:
                    del index[s]  # forgotten unadvised: new again below
                    self._gone(s, last_seen + 2 * p.inspect_ms)
                    removed = True
                    i = None
                elif gap >= p.inspect_ms:
                    if not was_warned:
                        advs.append(Advisory(Event.TIMEOUT, s, last_seen + p.warn_ms, last_seen, m.seq))
                    advs.append(Advisory(Event.EXPIRE, s, last_seen + p.inspect_ms, last_seen, m.seq))
                    self._gone(s, last_seen + p.inspect_ms)
                    del index[s]
                    removed = True
                    i = None
                elif was_warned or gap >= p.warn_ms:
                    if not was_warned:
                        advs.append(Advisory(Event.TIMEOUT, s, last_seen + p.warn_ms, last_seen, m.seq))
                    advs.append(Advisory(Event.RECOVER, s, m.ts_ms, last_seen, m.seq))
                    if row is not None:
                        row[5] = m.ts_ms
                    else:
                        self.recovered[i] = m.ts_ms
            if i is None:
                advs.append(Advisory(Event.NEW, s, m.ts_ms, m.ts_ms, m.seq))
                index[s] = len(seen) + len(new_rows)
                new_keys.append(s)
                new_rows.append([m.ts_ms, m.ts_ms, m.size, 0, m.ts_ms, 0])
                copies.append(True)
                continue
            if i >= len(seen):
                row = new_rows[i - len(seen)]
                last_copied, last_size = row[1], row[2]
            else:
                row = None
                last_copied, last_size = int(copied[i]), int(size[i])
            since_copy = m.ts_ms - last_copied
            copy = (
                m.force
                or (p.size_trigger > 0 and abs(m.size - last_size) >= p.size_trigger)
                # The interval is above 0.9 x inspect: below that the sender's hash is not needed.
                or (since_copy * 10 >= p.inspect_ms * 9 and since_copy >= copy_interval_ms(p, s))
            )
            if row is not None:
                row[0], row[2], row[3] = m.ts_ms, m.size, 0
                if copy:
                    row[1] = m.ts_ms
            else:
                seen[i], size[i], warned[i] = m.ts_ms, m.size, False
                if copy:
                    copied[i] = m.ts_ms
            copies.append(copy)
        if new_rows or removed:
            self._rebuild(new_keys, new_rows)
        advs += self.advance(clock_ms, p)
        return copies, advs

    def _rebuild(self, new_keys: list[str], new_rows: list[list[int]]) -> None:
        """Append this batch's new senders and drop expired ones, keeping index consistent."""
        keys = self.keys + new_keys
        extra = np.array(new_rows, dtype=np.int64).reshape(-1, 6)
        seen = np.concatenate([self.seen, extra[:, 0]])
        copied = np.concatenate([self.copied, extra[:, 1]])
        size = np.concatenate([self.size, extra[:, 2]])
        warned = np.concatenate([self.warned, extra[:, 3].astype(bool)])
        first = np.concatenate([self.first, extra[:, 4]])
        recovered = np.concatenate([self.recovered, extra[:, 5]])
        live = np.array(sorted(self.index.values()), dtype=np.int64)
        self.keys = [keys[i] for i in live]
        self.seen, self.copied, self.size, self.warned = seen[live], copied[live], size[live], warned[live]
        self.first, self.recovered = first[live], recovered[live]
        self.index = {k: i for i, k in enumerate(self.keys)}

    def advance(self, clock_ms: int, p: SamplingParams) -> list[Advisory]:
        """Move the clock: advise timeouts and expiries that fell due up to `clock_ms`."""
        self.clock_ms = clock = max(self.clock_ms, clock_ms)
        advs = self._advise_silent(clock, p)
        # After the expiries: one found late (the replicator was down) may be older than that.
        if self.expired:
            self.expired = {k: t for k, t in self.expired.items() if t > clock - FLEET_HISTORY_MS}
        return advs

    def _advise_silent(self, clock: int, p: SamplingParams) -> list[Advisory]:
        if not len(self.seen):
            return []
        advs: list[Advisory] = []
        if p.drop_late:
            late = np.flatnonzero(self.seen <= clock - 2 * p.inspect_ms)
            for i in late:
                del self.index[self.keys[i]]  # forgotten unadvised
                self._gone(self.keys[i], int(self.seen[i]) + 2 * p.inspect_ms)
            if len(late):
                self._rebuild([], [])
                if not len(self.seen):
                    return []
        expire = self.seen <= clock - p.inspect_ms
        timeout = ~self.warned & (self.seen <= clock - p.warn_ms)
        for i in np.flatnonzero(timeout):
            s, last = self.keys[i], int(self.seen[i])
            advs.append(Advisory(Event.TIMEOUT, s, last + p.warn_ms, last))
        self.warned |= timeout
        gone = np.flatnonzero(expire)
        for i in gone:
            s, last = self.keys[i], int(self.seen[i])
            advs.append(Advisory(Event.EXPIRE, s, last + p.inspect_ms, last))
            self._gone(s, last + p.inspect_ms)
            del self.index[s]
        if len(gone):
            self._rebuild([], [])
        return advs

    def next_due_ms(self, p: SamplingParams) -> int | None:
        """The earliest clock at which `advance` changes this table (a timeout or expiry falls
        due, or a gone sender leaves the fleet history); None when no clock ever would. Until
        then moving the clock without messages does nothing, so it need not be moved."""
        due: list[int] = []
        if len(self.seen):
            due.append(int(self.seen.min()) + p.inspect_ms)  # expire (drop_late's 2x comes later)
            if not self.warned.all():
                due.append(int(self.seen[~self.warned].min()) + p.warn_ms)
        if self.expired:
            due.append(min(self.expired.values()) + FLEET_HISTORY_MS)
        return min(due) if due else None
