"""`stream-replicator admin state` and `admin fleet`: what the sampling state in a checkpoint holds.

Reads the last committed state of a stream's sampling operator with Spark's state data
source (`format("statestore")`), a batch job on the checkpoint: the replicator may be running
or stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from replicator.config import Config, StreamConfig
from replicator.entry_files import checkpoint_location
from replicator.sampling import state
from replicator.spark.checkpoint import is_uri, open_checkpoint


@dataclass(frozen=True)
class TrackedSender:
    sender: str
    seen_ms: int
    copied_ms: int
    size: int
    advised: bool
    bucket: int
    first_ms: int = 0  # 0: not known (imported, or tracked before first-seen times were kept)
    recovered_ms: int = 0  # 0: never recovered from a timeout (or before this was kept)


@dataclass
class StateSummary:
    senders: list[TrackedSender]
    clock_ms: int
    buckets: int
    expired: dict[str, int] = field(default_factory=dict)
    """Senders gone from the state in its last hour (rules.FLEET_HISTORY_MS) -> when."""


def read_state(cfg: Config, s: StreamConfig, master: str = "local[1]") -> StateSummary:
    ckpt = checkpoint_location(cfg, s)
    if not is_uri(ckpt) and not open_checkpoint(ckpt, None).exists("state"):
        raise RuntimeError(f"{s.name}: no sampling state under {ckpt} yet (has the replicator run?)")
    from replicator.spark.session import build_session

    spark = build_session(master, f"stream-replicator-admin-{cfg.name}", conf=cfg.spark_conf)
    try:
        if not open_checkpoint(ckpt, spark).exists("state"):
            raise RuntimeError(f"{s.name}: no sampling state under {ckpt} yet (has the replicator run?)")
        rows = (
            spark.read.format("statestore")
            .load(ckpt)
            .select("key.bucket", "value.groupState.table")
            .collect()
        )
    finally:
        spark.stop()
    senders: list[TrackedSender] = []
    expired: dict[str, int] = {}
    clock = 0
    for bucket, blob in rows:
        table = state.decode(bytes(blob) if blob is not None else None)
        clock = max(clock, table.clock_ms)
        senders += [
            TrackedSender(
                r.sender, r.seen_ms, r.copied_ms, r.size, r.warned, int(bucket), r.first_ms, r.recovered_ms
            )
            for r in table.rows()
        ]
        expired.update(table.expired)
    senders.sort(key=lambda t: t.sender)
    return StateSummary(senders, clock, len(rows), expired)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z" if ms else "-"


def format_state(s: StreamConfig, st: StateSummary, value: str | None, limit: int) -> Iterator[str]:
    advised = sum(1 for t in st.senders if t.advised)
    yield (
        f"{s.name} ({s.stream}): {len(st.senders):,} tracked senders, {advised:,} advised timed out, "
        f"event-time clock {_when(st.clock_ms)}"
    )
    shown = [t for t in st.senders if value is None or t.sender == value]
    if value is not None and not shown:
        yield f"{value}: not tracked (never seen, or expired)"
        return
    yield f"{'sender':40s} {'seen':24s} {'copied':24s} {'size':>8s} advised"
    for t in shown[:limit]:
        yield f"{t.sender:40s} {_when(t.seen_ms):24s} {_when(t.copied_ms):24s} {t.size:8d} {'yes' if t.advised else 'no'}"
    if len(shown) > limit:
        yield f"... {len(shown) - limit:,} more (--limit)"


def format_fleet(s: StreamConfig, st: StateSummary, minutes: float, limit: int) -> Iterator[str]:
    """The fleet at a glance: senders by state, and those that became new, timed out, recovered
    or expired in the last `minutes` of the state's event-time clock (expiries: at most the
    last hour's, as long as the state remembers them)."""
    assert s.warn_duration is not None
    warn_ms = int(s.warn_duration.total_seconds() * 1000)
    warning = sum(1 for t in st.senders if t.advised)
    tracked = {t.sender for t in st.senders}
    gone = sum(1 for sender in st.expired if sender not in tracked)  # some came back since
    yield (
        f"{s.name} ({s.stream}): {len(st.senders):,} senders: {len(st.senders) - warning:,} healthy, "
        f"{warning:,} warning (advised timed out), {gone:,} expired in the last hour; "
        f"event-time clock {_when(st.clock_ms)}"
    )
    since = st.clock_ms - int(minutes * 60_000)
    changes = sorted(
        [(t.first_ms, "new", t.sender, f"first seen {_when(t.first_ms)}") for t in st.senders if t.first_ms > since]
        + [
            (t.seen_ms + warn_ms, "timeout", t.sender, f"last seen {_when(t.seen_ms)}, timed out {_when(t.seen_ms + warn_ms)}")
            for t in st.senders
            if t.advised and t.seen_ms + warn_ms > since
        ]
        + [(t.recovered_ms, "recover", t.sender, f"recovered {_when(t.recovered_ms)}") for t in st.senders
           if t.recovered_ms > since]
        + [(when, "expire", sender, f"expired {_when(when)}") for sender, when in st.expired.items() if when > since],
        reverse=True,
    )  # fmt: skip
    yield f"changed in the last {minutes:g} min: {len(changes):,}"
    for _, event, sender, detail in changes[:limit]:
        yield f"  {event:8s} {sender:40s} {detail}"
    if len(changes) > limit:
        yield f"  ... {len(changes) - limit:,} more (--limit)"
