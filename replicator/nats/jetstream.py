"""JetStream operations the replicator needs: stream state, start positions, the target stream,
and finding where an earlier run stopped copying."""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StreamConfig, StreamInfo, StreamState
from nats.js.errors import APIError, ServiceUnavailableError

from replicator.headers import MSG_ID_HEADER, SOURCE_HEADER, CopyOwner, SourceMark, parse_source_header
from replicator.nats.client import ReplicatorClient
from replicator.nats.readers import (
    DirectReader,
    RawMessage,
    ReadInterrupted,
    leader_message,
    read_chunks,
    require_shown_gone,
    stream_info,
    stream_info_doc,
)
from replicator.nats.wire import first_value, is_utf8
from replicator.subjects import rewrite_subject

T = TypeVar("T")

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def created_us(info: Any) -> int:
    """A stream's creation (µs since the epoch) from its info: it tells a stream from an earlier
    one of the same name (0 if the server does not say)."""
    return int(info.created.timestamp() * 1_000_000) if info.created else 0


async def stream_info_and_time(
    nc: Client, stream: str, timeout: float = 5.0
) -> tuple[StreamInfo | None, int | None]:
    """The stream's info and the time (ms, the answering server's clock: the stream's leader,
    which stamps its messages) when it was gathered; None for the time from a server that does
    not say (before 2.10). A message the info does not count was stored after that time."""
    from replicator.nats.timestamps import rfc3339_to_ns

    doc = await stream_info_doc(nc, stream, timeout=timeout)
    if doc is None:
        return None, None
    ts = doc.pop("ts", None)
    doc.pop("type", None)
    return StreamInfo.from_response(doc), rfc3339_to_ns(ts) // 1_000_000 if isinstance(ts, str) else None


async def go_source_initiated_consumer(nc: Client, stream: str, entry_name: str) -> str | None:
    """The durable consumer the Go original's source-initiated copier keeps on the source for a
    stream entry (`SR_<entry name>`), if it exists: a Go instance in that mode is, or was, in
    this entry's election, and resumes from it rather than from the target's last copy."""
    name = entry_name if "SR_".startswith(entry_name) else f"SR_{entry_name}"
    try:
        await nc.jetstream().consumer_info(stream, name)
    except (APIError, NatsTimeoutError, NoRespondersError):  # not there, or not ours to look at
        return None
    return name


async def wait_for_stream(
    nc: Client, stream: str, where: str, stop: Callable[[], bool] = lambda: False, interval: float = 2.0
) -> StreamInfo | None:
    """Wait, logging, until `stream` exists; None if `stop()` became true first."""
    logged = False
    while not stop():
        try:
            info = await stream_info(nc, stream)
        except (NoRespondersError, NatsTimeoutError, APIError) as e:
            info = None
            if not logged:
                log.warning("JetStream on %s is not answering (%s); waiting", where, e)
        if info is not None:
            if logged:
                log.info("source stream %s on %s now exists", stream, where)
            return info
        if not logged:
            log.warning(
                "source stream %s does not exist on %s yet; waiting for it to be created", stream, where
            )
            logged = True
        await asyncio.sleep(interval)
    return None


# JetStream's answers that say it is not set up, not that it is busy: retrying does not help.
NOT_ENABLED = (10039, 10076)  # JetStream not enabled for the account, or on the server


async def answered(
    step: Callable[[], Awaitable[T]],
    where: str,
    stop: Callable[[], bool] = lambda: False,
    interval: float = 2.0,
) -> T | None:
    """`step()`, tried again every `interval` while JetStream on `where` does not answer it (a
    server starting, a cluster still electing its leaders: no responders, a timeout, 503, a
    read cut short or a leader not holding a range yet), logging once; None if `stop()` became
    true first. Any other error is raised, and so is a 503 that says JetStream is off."""
    logged = False
    while not stop():
        try:
            result = await step()
        except (NoRespondersError, TimeoutError, ReadInterrupted, APIError) as e:
            if isinstance(e, APIError) and (
                not isinstance(e, ServiceUnavailableError) or e.err_code in NOT_ENABLED
            ):
                raise
            if not logged:
                log.warning(
                    "JetStream on %s is not answering (%s); waiting", where, str(e) or type(e).__name__
                )
                logged = True
            await asyncio.sleep(interval)
            continue
        if logged:
            log.info("JetStream on %s answers again", where)
        return result
    return None


async def sequence_at_time(nc: Client, stream: str, when: datetime, direct: bool) -> int | None:
    """First sequence stored at or after `when`, None if there is none yet."""
    stamp = when.isoformat().replace("+00:00", "Z")
    subject = f"$JS.API.DIRECT.GET.{stream}" if direct else f"$JS.API.STREAM.MSG.GET.{stream}"
    resp = await nc.request(subject, json.dumps({"start_time": stamp}).encode(), timeout=10)
    if direct:
        # A found message's reply carries the server's Nats-Sequence; a 404 does not. Not
        # nats-py's "Status" key: a stored message's own Status header lands there too (a copy
        # carries its source's), read as "none found": a look for copies in the target then
        # knew nothing, and they went again.
        seq = resp.headers.get("Nats-Sequence") if resp.headers else None
        return int(seq) if seq else None
    body = json.loads(resp.data)
    if "error" in body:
        return None
    return int(body["message"]["seq"])


async def first_sequence_at(nc: ReplicatorClient, info: StreamInfo, when: datetime) -> int:
    """The first sequence stored at or after `when`; when there is none, the one after the last
    that `info` showed. The server's own answer saying "none" stands only where the stream
    leader's last message (as `info` showed it) is older than `when`: a replica behind answers
    "none" of messages it does not hold yet, and a file store's search can miss live messages
    that lie past deleted ones. Else the leader's messages are searched by sequence."""
    stream = info.config.name or ""
    found = await sequence_at_time(nc, stream, when, bool(info.config.allow_direct))
    if found is not None:
        return found
    last = int(info.state.last_seq)
    if not info.state.messages:
        return last + 1
    when_ns = (when - EPOCH) // timedelta(microseconds=1) * 1000  # exact, unlike a float
    m = await leader_message(nc, stream, last)
    if m is not None and m.ts_ns < when_ns:
        return last + 1
    return await _first_stored_since(nc, stream, info.state, when_ns)


async def _first_stored_since(nc: ReplicatorClient, stream: str, shown: StreamState, when_ns: int) -> int:
    """The first of the stream leader's messages (as far as `shown`, its state in an earlier
    stream info, goes) stored at or after `when_ns`; its last + 1 when each is older or shown
    gone. A binary search over the first message at or after each sequence (deleted ones
    stepped over), about log2(last - first) gets. An answer of none from a sequence on counts
    as a candidate, and holds at the end only where a stream info shows those sequences gone
    (a leader behind answers none of what it lacks): else RangeNotHeld, and the start is tried
    again."""
    last = int(shown.last_seq)
    lo, hi = int(shown.first_seq), last + 1  # every sequence below lo: older; at hi: a candidate
    while lo < hi:
        mid = (lo + hi) // 2
        m = await leader_message(nc, stream, mid, ">")
        if m is None or m.ts_ns >= when_ns:
            hi = mid
        else:
            lo = m.seq + 1  # older, and nothing between mid and it
    if lo > last:
        return last + 1
    m = await leader_message(nc, stream, lo, ">")
    if m is not None:
        return m.seq
    await require_shown_gone(nc, stream, range(lo, last + 1), shown)
    return last + 1


async def last_sequence(nc: Client, info: StreamInfo, filter_subject: str = "") -> int:
    """The stream's last sequence, or that of its last message on `filter_subject` (0: none):
    what an entry reading only that subject has left to read up to."""
    if not filter_subject:
        return int(info.state.last_seq)
    req = json.dumps({"last_by_subj": filter_subject}).encode()
    resp = await nc.request(f"$JS.API.STREAM.MSG.GET.{info.config.name}", req, timeout=10)
    body = json.loads(resp.data)
    if "error" in body:
        if body["error"].get("code") == 404:
            return 0
        raise APIError.from_error(body["error"])
    return int(body["message"]["seq"])


async def message_time_ms(nc: ReplicatorClient, stream: str, seq: int, direct: bool) -> int | None:
    """The stored time of message `seq` (None if it is gone)."""
    reader = DirectReader(nc, stream)
    if direct:
        got = await reader.batch(seq, 1)
        if got and got[0].seq == seq:
            return got[0].ts_ns // 1_000_000
    m = await reader.leader_get(seq)
    return m.ts_ns // 1_000_000 if m is not None else None


@dataclass(frozen=True)
class TargetLimits:
    """What the target refuses whatever the order: a message larger than its stream's
    `max_msg_size` or its server's `max_payload`, or on a subject the stream does not hold."""

    max_msg_size: int | None  # None: the stream sets no limit
    max_payload: int
    subjects: tuple[str, ...]  # empty: not known (a stream with no subjects listens on its name)
    replicas: int = 1  # the stream's: more than one, a clustered stream
    # The stream takes fast-ingest batches (allow_batched, nats-server 2.14+): replicator.nats.publisher.
    batched: bool = False

    def size_limit(self) -> tuple[int, str]:
        """The smaller limit on a message's size (headers included), and what sets it."""
        if self.max_msg_size is not None and self.max_msg_size <= self.max_payload:
            return self.max_msg_size, "max_msg_size of the target stream"
        return self.max_payload, "max_payload of the target server"


async def target_limits(nc: ReplicatorClient, stream: str) -> TargetLimits:
    info = await stream_info(nc, stream)
    cfg = info.config if info is not None else None
    size = cfg.max_msg_size if cfg is not None and cfg.max_msg_size and cfg.max_msg_size > 0 else None
    subjects = tuple(cfg.subjects or ()) if cfg is not None else ()
    replicas = int(cfg.num_replicas or 1) if cfg is not None else 1
    batched = bool(cfg is not None and cfg.allow_batched)
    return TargetLimits(size, nc.max_payload, subjects, replicas, batched)


# The first nats-server release that takes fast-ingest batches (a stream's allow_batched).
FAST_BATCH_SERVER = (2, 14)
# The first whose newly elected stream leader answers as leader only once it has applied its
# log (nats-server d35b6ad0e): before it, a range read through a filter subject just after a
# leader change can find stored messages missing and take them for deleted (docs/design.md).
LEADER_APPLIES_LOG_SERVER = (2, 11)


def server_version(nc: Client) -> tuple[int, int] | None:
    """(major, minor) of the server `nc` is connected to; None when its INFO names none (nats-py
    then says 0.0.0-unknown) or one that cannot be read."""
    try:
        v = nc.connected_server_version
        version = (v.major, v.minor)
    except Exception:  # a version that is not major.minor.patch
        return None
    return None if version == (0, 0) else version


def takes_fast_batches(nc: Client) -> bool:
    """Whether the server `nc` is connected to is new enough for fast-ingest batches (an
    unknown one is taken as too old)."""
    v = server_version(nc)
    return v is not None and v >= FAST_BATCH_SERVER


def leader_change_warning(version: tuple[int, int] | None, replicas: int, filtered: bool) -> str | None:
    """What to tell a user whose clustered source stream runs on servers that let a new leader
    answer before it has applied its log, read through a filter subject (without one, a message
    such a leader lacks is taken for gone only where a reply shows it: replicator.nats.readers);
    None when that cannot happen."""
    if not filtered or replicas <= 1 or version is None or version >= LEADER_APPLIES_LOG_SERVER:
        return None
    return (
        f"the source server runs nats-server {version[0]}.{version[1]}: a stream leader elected while a batch "
        "is read can answer before it has applied its log, and where the filter subject matches nothing more "
        "in what it holds, the rest of a range can be taken for deleted and not copied; upgrade the source "
        "servers to 2.11 or later"
    )


async def last_message(nc: ReplicatorClient, info: StreamInfo) -> RawMessage | None:
    """The last message of the stream `info` describes (None when it holds none)."""
    if info.state.messages == 0:
        return None
    last = info.state.last_seq
    async for chunk in read_chunks(
        nc, info.config.name or "", last, last + 1, direct=bool(info.config.allow_direct)
    ):
        return chunk[-1]
    return None


def target_stream_config(
    source: StreamConfig, name: str, prefix: str, remove: str, batched: bool = False
) -> StreamConfig:
    """The target's configuration derived from the source's: same limits and storage, subjects
    rewritten like the messages, no mirror/sources, direct get on (the replicator reads its tail)
    and, where the server takes them (`batched`), fast-ingest batches (the copies' way in)."""
    subjects = [rewrite_subject(s, prefix, remove) for s in (source.subjects or [])]
    return StreamConfig(
        name=name,
        subjects=subjects or None,
        retention=source.retention,
        max_consumers=source.max_consumers,
        max_msgs=source.max_msgs,
        max_bytes=source.max_bytes,
        discard=source.discard,
        max_age=source.max_age,
        max_msgs_per_subject=source.max_msgs_per_subject,
        max_msg_size=source.max_msg_size,
        storage=source.storage,
        num_replicas=source.num_replicas,
        duplicate_window=source.duplicate_window or 120,
        allow_direct=True,
        allow_rollup_hdrs=source.allow_rollup_hdrs,
        deny_delete=source.deny_delete,
        deny_purge=source.deny_purge,
        compression=source.compression,
        allow_batched=True if batched else None,
        # Copies carry the source's per-message TTLs (Nats-TTL), which a stream without it
        # refuses (code 10166): every copy of such a message would be held.
        allow_msg_ttl=True if source.allow_msg_ttl else None,
    )


async def ensure_target_stream(
    target: Client, source_info: StreamInfo, name: str, prefix: str, remove: str, create: bool
) -> StreamInfo:
    info = await stream_info(target, name)
    if info is not None:
        return info
    if not create:
        raise RuntimeError(
            f"target stream {name} does not exist and no_target_create is set: create it on the target "
            "cluster or unset no_target_create"
        )
    cfg = target_stream_config(source_info.config, name, prefix, remove, takes_fast_batches(target))
    js = target.jetstream()

    async def add(cfg: StreamConfig) -> StreamInfo:
        try:
            return await js.add_stream(cfg)
        except APIError as e:
            # Fan-in (several data centres into one central stream): another replicator created
            # it between our look and our create.
            if e.err_code == 10058 and (raced := await stream_info(target, name)) is not None:
                log.info("target stream %s was created meanwhile by another replicator", name)
                return raced
            raise

    try:
        info = await add(cfg)
    except APIError as e:
        # A 3-replica source copied to a smaller target cluster: fall back to one replica.
        if (cfg.num_replicas or 1) > 1 and (
            "insufficient resources" in str(e).lower() or e.err_code == 10074
        ):
            log.warning(
                "target cannot hold %d replicas of %s (%s); creating it with 1", cfg.num_replicas, name, e
            )
            cfg.num_replicas = 1
            info = await add(cfg)
        else:
            raise
    log.info("created target stream %s (subjects %s)", name, cfg.subjects)
    return info


async def find_last_copied(
    target: ReplicatorClient, target_stream: str, owner: CopyOwner, scan_limit: int = 10_000
) -> int | None:
    """The highest source sequence `owner` already copied into the target, from the copies at
    its tail (CopyOwner.owns): 0 when the target holds nothing, None when none of the last
    `scan_limit` messages is the owner's (a target shared with other writers). The highest
    of the owner's last copies, not the last stored: a start that filled a gap left by an
    unchained batch stored lower copies after higher ones (replicator.gap_fill); the
    1,000 messages before the last copy found are looked at too."""
    info = await stream_info(target, target_stream)
    if info is None or info.state.messages == 0:
        return 0
    last = info.state.last_seq
    first = max(info.state.first_seq, last - scan_limit + 1, 1)
    direct = bool(info.config.allow_direct)

    async def ours_in(lo: int, hi: int) -> list[int]:
        msgs = [
            m async for chunk in read_chunks(target, target_stream, lo, hi + 1, direct=direct) for m in chunk
        ]
        return [mark.sequence for mark, msg_id in _marks(msgs) if owner.owns(mark, msg_id)]

    hi = last
    while hi >= first:
        lo = max(first, hi - 999)
        ours = await ours_in(lo, hi)
        if ours:
            before = await ours_in(max(first, lo - 1000), lo - 1) if lo > first else []
            return max(ours + before)
        hi = lo - 1
    return None


async def holds_copy(
    target: ReplicatorClient, info: StreamInfo, seq: int, owner: CopyOwner, source_seq: int
) -> bool:
    """Whether message `seq` of the target stream `info` describes (as read now) is `owner`'s
    copy of source sequence `source_seq`: False when it is gone or another message."""
    if not info.state.first_seq <= seq <= info.state.last_seq:
        return False
    async for chunk in read_chunks(
        target, info.config.name or "", seq, seq + 1, direct=bool(info.config.allow_direct)
    ):
        return any(
            mark.sequence == source_seq and owner.owns(mark, msg_id)
            for mark, msg_id in _marks([m for m in chunk if m.seq == seq])
        )
    return False


def _marks(msgs: list[RawMessage]) -> list[tuple[SourceMark, str | None]]:
    """(Choria-SR-Source, Nats-Msg-Id) of each message that has the former."""
    out = []
    for m in msgs:
        mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
        if mark is not None:
            out.append((mark, first_value(m.headers, MSG_ID_HEADER)))
    return out


# How far before a batch's publishing began its target is read for the batch's copies: the
# replicator's and the servers' clocks may disagree.
CLOCK_SLACK_S = 120.0


async def copies_in_range(
    target: ReplicatorClient,
    target_stream: str,
    owner: CopyOwner,
    first: int,
    last: int,
    since_ns: int,
    scan_limit: int = 200_000,
    wanted: Collection[int] | None = None,
) -> dict[int, int] | None:
    """Source sequence -> target sequence of the copies `owner` has in the target of source
    sequences `first` to `last`, given that none was stored before `since_ns`: read forward
    from then (less CLOCK_SLACK_S) until every one is found, or 1,000 messages past the owner's
    copy of `last` (a batch's copies are stored in their order: what a gap lacks does not come
    later), or the end. None when that is not known: more than `scan_limit` messages to read,
    or no message of the target found at or after that time. `wanted`: only those source
    sequences (sparse copies, a sampled batch's), not every one from `first` to `last`."""
    info = await stream_info(target, target_stream)
    if info is None or info.state.messages == 0:
        return None
    when = datetime.fromtimestamp(since_ns / 1e9 - CLOCK_SLACK_S, UTC)
    start = await sequence_at_time(target, target_stream, when, bool(info.config.allow_direct))
    if start is None:
        return None
    found: dict[int, int] = {}
    before, scanned, past_last = 0, 0, None  # messages before the range's first copy, and from it
    chunks = read_chunks(
        target,
        target_stream,
        start,
        int(info.state.last_seq) + 1,
        direct=bool(info.config.allow_direct),
        chunk_messages=1_000,
    )
    async for chunk in chunks:
        for m in chunk:
            if found:
                scanned += 1
            else:
                before += 1
            mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
            if mark is None or not first <= mark.sequence <= last:
                continue
            if wanted is not None and mark.sequence not in wanted:
                continue
            if owner.owns(mark, first_value(m.headers, MSG_ID_HEADER)):
                found.setdefault(mark.sequence, m.seq)
                if mark.sequence == last and past_last is None:
                    past_last = scanned
        # A copy retried after the batch's later ones (a failed retry left it there) comes
        # after them: 10,000 messages of margin.
        everyone = len(wanted) if wanted is not None else last - first + 1
        if len(found) == everyone or (past_last is not None and scanned - past_last > 10_000):
            return found
        if scanned > scan_limit or before > scan_limit:
            return None
    return found


class RowsOnSubject:
    """The source sequences of the copies about to be published on one target subject."""

    def __init__(self, seqs: Iterable[int] = ()) -> None:
        self.seqs = sorted(seqs)
        self.members = frozenset(self.seqs)

    def later_than(self, seq: int) -> int:
        return len(self.seqs) - bisect.bisect_right(self.seqs, seq)

    def is_later(self, other: int, seq: int) -> bool:
        return other > seq and other in self.members


NO_ROWS = RowsOnSubject()


async def pushed_out(
    target: ReplicatorClient,
    target_stream: str,
    subject: str,
    after_seq: int,
    owner: CopyOwner,
    seq: int,
    also_later: RowsOnSubject = NO_ROWS,
) -> bool:
    """Whether the owner's copy of source sequence `seq`, had it been stored on `subject`
    before target sequence `after_seq`, would be gone by now: the target keeps
    `max_msgs_per_subject` messages a subject, and at least that many arrived on it after
    `after_seq` (whoever wrote them, but not the owner's copies of earlier source sequences,
    which a gap fill stored there later), counting the owner's copies of the rows of
    `also_later` later than `seq` (about to be published on `subject`) once, whether the
    target holds them or not."""
    info = await stream_info(target, target_stream)
    limit = int(info.config.max_msgs_per_subject or 0) if info is not None else 0
    if info is None or limit <= 0:
        return False
    later = also_later.later_than(seq)
    if later >= limit:
        return True
    if not is_utf8(subject):
        # A read filtered on it would ask in JSON for its U+FFFD form, another subject: not
        # known to be gone, it is published again (an old value last rather than one lost).
        return False
    if after_seq >= int(info.state.last_seq):
        return False
    async for chunk in read_chunks(
        target,
        target_stream,
        after_seq + 1,
        int(info.state.last_seq) + 1,
        direct=bool(info.config.allow_direct),
        filter_subject=subject,
    ):
        for m in chunk:
            mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
            if (
                mark is not None
                and (mark.sequence < seq or also_later.is_later(mark.sequence, seq))
                and owner.owns(mark, first_value(m.headers, MSG_ID_HEADER))
            ):
                continue  # stored by a gap fill, or counted already
            later += 1
        if later >= limit:
            return True
    return False


def as_start_time(
    start_time: datetime | None, start_delta: timedelta | None, now: datetime
) -> datetime | None:
    if start_time is not None:
        return start_time
    if start_delta is not None:
        return now - start_delta
    return None
