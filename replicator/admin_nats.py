"""`stream-replicator admin election` and `admin advisories`: what the servers say now.

`election`: who holds each leader-elected entry's key in CHORIA_LEADER_ELECTION.
`advisories`: the sampling advisories stored in a stream (one that captures the advisory
subject), optionally about one sender, since a given age, optionally following new ones.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from replicator.config import Config, StreamConfig
from replicator.election import BUCKET, election_key
from replicator.nats.client import ReplicatorClient
from replicator.nats.connect import open_connection
from replicator.nats.jetstream import sequence_at_time, stream_info
from replicator.nats.readers import read_chunks
from replicator.nats.tls import TLSFiles
from replicator.nats.urls import parse_nats_url
from replicator.sampling.rules import PROTOCOL

# An admin command tries each server this many times more, then says it cannot reach them:
# max_reconnect_attempts=0 meant no limit to nats-py's first connect, so it waited for ever.
ADMIN_CONNECT_RETRIES = 2


async def admin_connection(url: str, tls: TLSFiles | None, name: str) -> ReplicatorClient:
    """A connection for an admin command: one line, and no wait for ever, if no server answers."""
    import nats.errors

    try:
        nc = await open_connection(url, tls, name=name, max_reconnect_attempts=ADMIN_CONNECT_RETRIES)
    except nats.errors.NoServersError:
        raise RuntimeError(
            f"cannot reach a NATS server at {parse_nats_url(url).redacted()}: start it, or give its URL"
        ) from None
    nc.options["max_reconnect_attempts"] = -1  # once connected, `--follow` outlives a server's restart
    return nc


@dataclass(frozen=True)
class ElectionState:
    label: str
    key: str
    candidate: str  # this config's leader_election_name
    leader: str | None  # who holds the key now; None: nobody
    age_s: float | None = None  # since the leader last renewed it
    revision: int | None = None
    ttl_s: float | None = None
    problem: str = ""


def format_election(states: list[ElectionState]) -> Iterator[str]:
    for st in states:
        head = f"{st.label:30s} {st.key:34s}"
        if st.problem:
            yield f"{head} {st.problem}"
        elif st.leader is None:
            yield f"{head} no leader (the last one stopped, or its key expired); candidates take it within a second"
        else:
            me = " (this config's candidate)" if st.leader == st.candidate else ""
            yield (
                f"{head} led by {st.leader}{me}, renewed {st.age_s:.1f} s ago "
                f"(revision {st.revision}, TTL {st.ttl_s:.0f} s)"
            )


async def election_states(cfg: Config) -> list[ElectionState]:
    out = []
    for s in cfg.streams:
        label = f"{s.stream}/{s.name}"
        key = election_key(s.name, s.stream)
        if not s.leader_election_name:
            out.append(
                ElectionState(label, "-", "", None, problem="not leader-elected (no leader_election_name)")
            )
            continue
        out.append(await _election_state(s, label, key))
    return out


async def _election_state(s: StreamConfig, label: str, key: str) -> ElectionState:
    from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError

    candidate = s.leader_election_name or ""
    nc = await admin_connection(s.source_url, s.source_tls, "sr-admin-election")
    try:
        js = nc.jetstream()
        try:
            kv = await js.key_value(BUCKET)
        except (BucketNotFoundError, NotFoundError):
            where = parse_nats_url(s.source_url).redacted()
            return ElectionState(
                label, key, candidate, None, problem=f"no {BUCKET} bucket on {where}: nobody can lead"
            )
        ttl = (await kv.status()).ttl
        try:
            entry = await kv.get(key)
        except (KeyNotFoundError, NotFoundError):
            return ElectionState(label, key, candidate, None, ttl_s=ttl)
        raw = await js.get_last_msg(f"KV_{BUCKET}", f"$KV.{BUCKET}.{key}")
        stamp = raw.time if isinstance(raw.time, datetime) else None
        age = (datetime.now(UTC) - stamp).total_seconds() if stamp else None
        return ElectionState(label, key, candidate, (entry.value or b"").decode(), age, entry.revision, ttl)
    finally:
        await nc.close()


@dataclass(frozen=True)
class StoredAdvisory:
    timestamp: int
    event: str
    value: str
    age: int
    replicator: str

    def line(self) -> str:
        when = datetime.fromtimestamp(self.timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S")
        return f"[{when}] {self.event:>7s} {self.value} seen {_age(self.age)} earlier on {self.replicator}"


def _age(seconds: int) -> str:
    """11m2s, 0s, 26h0m5s: as Go prints a duration."""
    h, rest = divmod(max(0, seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m}m{s}s" if h else f"{m}m{s}s" if m else f"{s}s"


def parse_advisory(data: bytes) -> StoredAdvisory | None:
    """An io.choria.sr.v2.age_advisory message; None for anything else in the stream."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("protocol") != PROTOCOL:
        return None
    try:
        return StoredAdvisory(
            int(doc["timestamp"]),
            str(doc["event"]),
            str(doc["value"]),
            int(doc.get("age", 0)),
            str(doc.get("replicator", "")),
        )
    except (KeyError, TypeError, ValueError):
        return None


async def stored_advisories(
    url: str, stream: str, since: timedelta, value: str | None, follow: bool, poll_s: float = 1.0
) -> AsyncIterator[str]:
    """Lines for the advisories in `stream` stored within `since` (about `value` if given):
    first a line saying how many messages are searched; with `follow`, new ones as they come."""
    nc = await admin_connection(url, None, "sr-admin-advisories")
    try:
        info = await stream_info(nc, stream)
        if info is None:
            raise RuntimeError(f"stream {stream} does not exist on {parse_nats_url(url).redacted()}")
        direct = bool(info.config.allow_direct)
        start = await sequence_at_time(nc, stream, datetime.now(UTC) - since, direct)
        end = int(info.state.last_seq) + 1
        nxt = start if start is not None else end
        about = f" related to {value}" if value else ""
        yield f"Searching {max(0, end - nxt):,} messages for advisories{about}"
        while True:
            async for chunk in read_chunks(nc, stream, nxt, end, direct=direct):
                for m in chunk:
                    adv = parse_advisory(m.data)
                    if adv is not None and (value is None or adv.value == value):
                        yield adv.line()
                    nxt = m.seq + 1
            nxt = max(nxt, end)
            if not follow:
                return
            await asyncio.sleep(poll_s)
            info = await stream_info(nc, stream)
            end = int(info.state.last_seq) + 1 if info is not None else end
    finally:
        await nc.close()
