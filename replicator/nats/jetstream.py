"""JetStream operations the replicator needs: stream state, start positions, the target stream,
reading sequence ranges fast, and finding where an earlier run stopped copying."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig, StreamConfig, StreamInfo
from nats.js.errors import APIError, NotFoundError

from replicator.headers import DIRECT_GET_HEADERS, SOURCE_HEADER, parse_source_header
from replicator.nats.connect import FastHeaderClient
from replicator.nats.direct_reply import is_status, parse_direct_reply
from replicator.nats.timestamps import rfc3339_to_ns
from replicator.subjects import rewrite_subject

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RawMessage:
    """One stored message, as read from the source stream."""

    seq: int
    subject: str
    ts_ns: int
    headers: dict[str, str] | None
    data: bytes


async def stream_info(nc: Client, stream: str) -> StreamInfo | None:
    try:
        return await nc.jetstream().stream_info(stream)
    except NotFoundError:
        return None


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


async def sequence_at_time(nc: Client, stream: str, when: datetime, direct: bool) -> int | None:
    """First sequence stored at or after `when`, None if there is none yet."""
    stamp = when.isoformat().replace("+00:00", "Z")
    subject = f"$JS.API.DIRECT.GET.{stream}" if direct else f"$JS.API.STREAM.MSG.GET.{stream}"
    resp = await nc.request(subject, json.dumps({"start_time": stamp}).encode(), timeout=10)
    if direct:
        if resp.headers and resp.headers.get("Status"):
            return None
        return int(resp.headers["Nats-Sequence"]) if resp.headers else None
    body = json.loads(resp.data)
    if "error" in body:
        return None
    return int(body["message"]["seq"])


async def message_time_ms(nc: Client, stream: str, seq: int, direct: bool) -> int | None:
    """The stored time of message `seq` (None if it is gone)."""
    reader = DirectReader(nc, stream)
    if direct:
        got = await reader._batch(seq, 1)
        if got and got[0].seq == seq:
            return got[0].ts_ns // 1_000_000
    m = await reader._leader_get(seq)
    return m.ts_ns // 1_000_000 if m is not None else None


async def count_messages(url: str, stream: str) -> int:
    """Messages in `stream` now (0 if it does not exist), on a connection of its own."""
    import nats

    nc = await nats.connect(url.split(","))
    try:
        info = await stream_info(nc, stream)
        return 0 if info is None else int(info.state.messages)
    finally:
        await nc.close()


async def read_all(url: str, stream: str) -> list[RawMessage]:
    """Every message of `stream` in sequence order (for checks: it holds them all in memory)."""
    import nats

    nc = await nats.connect(url.split(","), pending_size=256 * 1024 * 1024)
    try:
        info = await stream_info(nc, stream)
        if info is None or info.state.messages == 0:
            return []
        chunks = await DirectReader(nc, stream, chunk=5000).read(
            info.state.first_seq, info.state.last_seq + 1
        )
        return [m for c in chunks for m in c]
    finally:
        await nc.close()


def target_stream_config(source: StreamConfig, name: str, prefix: str, remove: str) -> StreamConfig:
    """The target's configuration derived from the source's: same limits and storage, subjects
    rewritten like the messages, no mirror/sources, direct get on (the replicator reads its tail)."""
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
    cfg = target_stream_config(source_info.config, name, prefix, remove)
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


def _clean_headers(h: dict[str, str] | None) -> dict[str, str] | None:
    if not h:
        return None
    out = {k: v for k, v in h.items() if k not in DIRECT_GET_HEADERS}
    return out or None


class DirectReader:
    """Reads `[start, end)` of a stream with batched direct gets (`{"seq": s, "batch": n}`).

    Direct gets may be answered by a replica that is a little behind; whatever they cannot give
    is read from the stream leader (`STREAM.MSG.GET`), so a range is always read completely.
    """

    def __init__(self, nc: Client, stream: str, filter_subject: str = "", chunk: int = 2000):
        self.nc = nc
        self.stream = stream
        self.filter_subject = filter_subject
        self.chunk = chunk

    async def _batch(self, seq: int, n: int) -> list[RawMessage]:
        """One batched direct get: up to n messages from seq on."""
        req: dict[str, object] = {"seq": seq, "batch": n}
        if self.filter_subject:
            req["next_by_subj"] = self.filter_subject
        inbox = self.nc.new_inbox()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        out: list[RawMessage] = []

        def on_raw(_subject: bytes, data: bytes, raw: bytes | None) -> None:
            if done.done():
                return
            if is_status(raw):
                # 204 ends the batch, 404 means nothing at or after seq: either way, done.
                done.set_result(None)
                return
            try:
                seq, subject, ts_ns, headers = parse_direct_reply(raw or b"")
            except ValueError as e:
                done.set_exception(e)
                return
            out.append(RawMessage(seq, subject, ts_ns, headers, data))

        async def on_msg(m: Msg) -> None:
            h = m.headers or {}
            if h.get("Status"):
                if not done.done():
                    done.set_result(None)
                return
            out.append(
                RawMessage(
                    seq=int(h["Nats-Sequence"]),
                    subject=h["Nats-Subject"],
                    ts_ns=rfc3339_to_ns(h["Nats-Time-Stamp"]),
                    headers=_clean_headers(h),
                    data=m.data,
                )
            )

        # The replicator's own client reads replies raw. A plain nats-py client goes through
        # nats-py's parsing: read_all, which checks and the scenario runner use, so what they
        # verify is read independently of the fast path.
        fast = self.nc if isinstance(self.nc, FastHeaderClient) else None
        if fast is not None:
            sub = await fast.raw_subscribe(inbox, on_raw)
        else:
            sub = await self.nc.subscribe(inbox, cb=on_msg)
        try:
            await self.nc.publish(f"$JS.API.DIRECT.GET.{self.stream}", json.dumps(req).encode(), reply=inbox)
            await asyncio.wait_for(done, timeout=30)
        finally:
            if fast is not None:
                await fast.raw_unsubscribe(sub)
            else:
                await sub.unsubscribe()
        return out

    async def _leader_get(self, seq: int) -> RawMessage | None:
        req: dict[str, object] = {"seq": seq}
        if self.filter_subject:
            req["next_by_subj"] = self.filter_subject
        resp = await self.nc.request(
            f"$JS.API.STREAM.MSG.GET.{self.stream}", json.dumps(req).encode(), timeout=10
        )
        body = json.loads(resp.data)
        if "error" in body:
            if body["error"].get("code") == 404:
                return None
            raise APIError.from_error(body["error"])
        m = body["message"]
        raw_hdr = base64.b64decode(m["hdrs"]) if m.get("hdrs") else b""
        headers = _parse_raw_headers(raw_hdr)
        return RawMessage(
            seq=int(m["seq"]),
            subject=m["subject"],
            ts_ns=rfc3339_to_ns(m["time"]),
            headers=headers,
            data=base64.b64decode(m.get("data") or ""),
        )

    async def read(self, start: int, end: int) -> list[list[RawMessage]]:
        """All messages with start <= seq < end, in sequence order, in chunks."""
        chunks: list[list[RawMessage]] = []
        seq = start
        while seq < end:
            msgs = await self._batch(seq, min(self.chunk, end - seq))
            msgs = [m for m in msgs if m.seq < end]
            if msgs:
                chunks.append(msgs)
                seq = msgs[-1].seq + 1
                continue
            # Nothing from the replica that answered: ask the leader, which is authoritative.
            m = await self._leader_get(seq)
            if m is None or m.seq >= end:
                break
            chunks.append([m])
            seq = m.seq + 1
        return chunks


async def read_range(
    nc: Client,
    stream: str,
    filter_subject: str,
    start: int,
    end: int,
    direct: bool | None = None,
    chunk: int = 5000,
) -> list[list[RawMessage]]:
    """Messages with start <= seq < end (matching filter_subject), in order, in chunks: by direct
    get when the stream allows it (`direct`; None: ask the stream), else with a consumer."""
    if direct is None:
        info = await stream_info(nc, stream)
        direct = bool(info and info.config.allow_direct)
    reader = (DirectReader if direct else ConsumerReader)(nc, stream, filter_subject, chunk)
    return await reader.read(start, end)


class ConsumerReader:
    """Fallback for source streams without `allow_direct`: an ephemeral, unacknowledged pull
    consumer from the range start."""

    def __init__(self, nc: Client, stream: str, filter_subject: str = "", chunk: int = 1000):
        self.nc = nc
        self.stream = stream
        self.filter_subject = filter_subject
        self.chunk = chunk

    async def read(self, start: int, end: int) -> list[list[RawMessage]]:
        from nats.js.api import AckPolicy, DeliverPolicy

        js = self.nc.jetstream()
        cfg = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            ack_policy=AckPolicy.NONE,
            filter_subject=self.filter_subject or None,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        )
        sub = await js.pull_subscribe(
            self.filter_subject or ">", durable=None, stream=self.stream, config=cfg
        )
        chunks: list[list[RawMessage]] = []
        try:
            seq = start
            while seq < end:
                try:
                    got = await sub.fetch(min(self.chunk, end - seq), timeout=2)
                except NatsTimeoutError:
                    info = await stream_info(self.nc, self.stream)
                    if info is None or info.state.last_seq < seq:
                        break
                    continue
                batch = []
                for m in got:
                    md = m.metadata
                    s = md.sequence.stream
                    if s >= end:
                        seq = end
                        break
                    batch.append(
                        RawMessage(
                            seq=s,
                            subject=m.subject,
                            ts_ns=int(md.timestamp.timestamp() * 1e9),
                            headers=dict(m.headers) if m.headers else None,
                            data=m.data,
                        )
                    )
                    seq = s + 1
                if batch:
                    chunks.append(batch)
        finally:
            await sub.unsubscribe()
        return chunks


def _parse_raw_headers(raw: bytes) -> dict[str, str] | None:
    if not raw:
        return None
    lines = raw.decode("utf-8", "replace").split("\r\n")[1:]
    out: dict[str, str] = {}
    for line in lines:
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out or None


async def find_last_copied(
    target: Client,
    target_stream: str,
    source_stream: str,
    replicator: str,
    config_name: str,
    scan_limit: int = 10_000,
) -> int:
    """The highest source sequence this replicator already copied into the target, from the
    `Choria-SR-Source` headers at the target's tail; 0 when none is found within `scan_limit`
    messages (a target shared with other replicators interleaves their copies)."""
    info = await stream_info(target, target_stream)
    if info is None or info.state.messages == 0:
        return 0
    last = info.state.last_seq
    first = max(info.state.first_seq, last - scan_limit + 1, 1)
    reader = DirectReader(target, target_stream, chunk=1000) if info.config.allow_direct else None
    hi = last
    while hi >= first:
        lo = max(first, hi - 999)
        if reader is not None:
            chunks = await reader.read(lo, hi + 1)
            msgs = [m for c in chunks for m in c]
        else:
            leader = DirectReader(target, target_stream)
            msgs = []
            for s in range(lo, hi + 1):
                m = await leader._leader_get(s)
                if m is not None and m.seq == s:
                    msgs.append(m)
        for m in reversed(msgs):
            mark = parse_source_header((m.headers or {}).get(SOURCE_HEADER))
            if (
                mark
                and mark.stream == source_stream
                and mark.replicator == replicator
                and mark.config_name == config_name
            ):
                return mark.sequence
        hi = lo - 1
    return 0


def as_start_time(
    start_time: datetime | None, start_delta: timedelta | None, now: datetime
) -> datetime | None:
    if start_time is not None:
        return start_time
    if start_delta is not None:
        return now - start_delta
    return None
