"""Reading a sequence range of a stream, in order, as bounded chunks.

`read_chunks` is the one read path: the data source's tasks and the in-flight catch-up both use
it. Streams with `allow_direct` are read with batched direct gets; others with an ephemeral pull
consumer. Each chunk is one request's worth (at most `chunk_messages` messages and about
`chunk_bytes` bytes), so a reader holds one chunk at a time, however long its range.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import json
import secrets
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.js.api import StreamInfo, StreamState
from nats.js.errors import APIError, NotFoundError

from replicator.nats import wire
from replicator.nats.client import ReplicatorClient
from replicator.nats.timestamps import rfc3339_to_ns
from replicator.subjects import subject_matches

# How long a reader waits for the next reply of a request before it gives up on the range.
REQUEST_TIMEOUT_S = 30.0
# Leader gets in flight at once when a replica could not answer single direct gets.
LEADER_GETS = 32
# A stream info's deleted sequences are asked for only when it has at most this many: the list
# comes in one reply, and a stream with per-subject limits can hold millions.
DELETED_DETAILS_MAX = 10_000


class ReadInterrupted(ConnectionError):
    """The connection was lost while a request's replies were coming: they are lost with it."""


class RangeNotHeld(ReadInterrupted):
    """The servers answering now do not hold the whole range yet (a stream leader just elected
    and still applying its log, a replica catching up): the range is read again later, never
    taken as ending early."""


async def await_replies(
    nc: ReplicatorClient,
    done: asyncio.Future[None],
    timeout: float,
    what: str,
    progress: Callable[[], int] = lambda: 0,
    since_reconnects: int | None = None,
) -> None:
    """Wait for `done` (a request's replies all in), for at most `timeout` without progress
    (`progress()`, the replies received so far, not moving): a slow link that keeps delivering
    is waited for, however long the whole answer takes. A connection lost or re-established
    meanwhile fails at once (ReadInterrupted) rather than after `timeout`: a reply sent while it
    was down never arrives (`since_reconnects`: the count before the request was sent)."""
    loop = asyncio.get_running_loop()
    reconnects = nc.stats["reconnects"] if since_reconnects is None else since_reconnects
    deadline = loop.time() + timeout
    seen = progress()
    while True:
        if progress() != seen:
            seen = progress()
            deadline = loop.time() + timeout
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(f"{what}: no reply for {timeout:g} s")
        try:
            await asyncio.wait_for(asyncio.shield(done), min(0.25, left))
            return
        except TimeoutError:
            if done.done():
                done.result()  # its own outcome, not ours
                return
            if not nc.is_connected or nc.stats["reconnects"] != reconnects:
                raise ReadInterrupted(f"{what}: the connection was lost while reading; read again") from None


@dataclass(slots=True)
class RawMessage:
    """One stored message, as read from a stream."""

    seq: int
    subject: str
    ts_ns: int
    headers: wire.Headers | None
    data: bytes


@dataclass
class DirectReader:
    """Batched direct gets (`{"seq": s, "batch": n, "max_bytes": b}`). A replica that is a
    little behind may answer a direct get; whatever it cannot give is read from the stream
    leader (`STREAM.MSG.GET`), so a range is always read completely."""

    nc: ReplicatorClient
    stream: str
    filter_subject: str = ""
    chunk_messages: int = 5000
    chunk_bytes: int = 16 << 20
    # A message the leader's answers lack is gone only where one reply shows it (source reads:
    # a miss is a copy lost); else it is gone once the leader, asked twice, lacks it (reads of
    # the target, whose last messages may be deleted with no later one ever to come).
    prove_gone: bool = False

    async def batch(self, seq: int, n: int) -> list[RawMessage]:
        """One batched direct get: up to n messages from seq on."""
        req: dict[str, object] = {"seq": seq, "batch": n, "max_bytes": self.chunk_bytes}
        if self.filter_subject:
            req["next_by_subj"] = self.filter_subject
        inbox = self.nc.new_inbox()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        out: list[RawMessage] = []

        def on_reply(_subject: bytes, _reply: bytes, data: bytes, block: bytes | None) -> None:
            if done.done():
                return
            if wire.is_status(block):
                # 204 ends the batch, 404 means nothing at or after seq: either way, done.
                done.set_result(None)
                return
            try:
                seq, subject, ts_ns, headers = wire.parse_direct_reply(block or b"")
            except Exception as e:  # any reply it cannot read fails the read: never a gap
                done.set_exception(e)
                return
            out.append(RawMessage(seq, subject, ts_ns, headers, data))

        sub = await self.nc.raw_subscribe(inbox, on_reply)
        try:
            await self.nc.publish(f"$JS.API.DIRECT.GET.{self.stream}", json.dumps(req).encode(), reply=inbox)
            await await_replies(
                self.nc,
                done,
                REQUEST_TIMEOUT_S,
                f"direct get of stream {self.stream} from {seq}",
                out.__len__,
            )
        finally:
            await self.nc.raw_unsubscribe(sub)
        return out

    async def each(self, seqs: Sequence[int]) -> list[RawMessage]:
        """Messages `seqs` (ascending), each by a direct get of its own, all asked at once: for
        messages far apart, where a batched get would read every one between them too. What
        the replica that answered does not give (a 404 from one behind, a 503 with none
        serving direct gets) is read from the stream leader; a sequence the leader does not
        hold either is left out (deleted, or expired), unless the leader holds less than the
        stream did (RangeNotHeld: read again later, as for a range). Each is returned once."""
        if not seqs:
            return []
        inbox = self.nc.new_inbox()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        got: dict[int, RawMessage] = {}
        missed: list[int] = []
        # Each request's reply subject ends in its sequence: a status reply carries nothing else.
        asked = {f"{inbox}.{seq}".encode(): seq for seq in seqs}

        def on_reply(subject: bytes, _reply: bytes, data: bytes, block: bytes | None) -> None:
            if done.done():
                return
            seq = asked.pop(subject, None)
            if seq is None:
                return  # not one of ours, or answered already
            try:
                if not block:
                    raise wire.WireError(f"direct get of sequence {seq}: a reply without headers")
                if wire.status_code(block) is not None:
                    missed.append(seq)  # the leader says what the replica could not
                else:
                    at, subj, ts_ns, headers = wire.parse_direct_reply(block)
                    if at != seq:
                        raise wire.WireError(f"direct get of sequence {seq} answered with sequence {at}")
                    got[seq] = RawMessage(seq, subj, ts_ns, headers, data)
            except Exception as e:  # any reply it cannot read fails the read: never a gap
                done.set_exception(e)
                return
            if not asked:
                done.set_result(None)

        reconnects = self.nc.stats["reconnects"]  # before the requests: a reconnect while sent counts
        sub = await self.nc.raw_subscribe(f"{inbox}.*", on_reply)
        try:
            requests = [(f"{inbox}.{seq}", b'{"seq":%d}' % seq) for seq in seqs]
            await self.nc.publish_requests(self.direct_get_subject(), requests)
            await await_replies(
                self.nc, done, REQUEST_TIMEOUT_S, f"direct gets of {len(seqs)} messages of stream {self.stream}",
                lambda: len(seqs) - len(asked), since_reconnects=reconnects,
            )  # fmt: skip
        finally:
            await self.nc.raw_unsubscribe(sub)
        if missed:
            got.update(await self._from_leader(missed))
        # A sequence that no longer holds a message on the filter's subjects (another life of the
        # stream) is gone, as a range read would find it. pop: a sequence asked twice goes once.
        keep = (lambda m: subject_matches(m.subject, self.filter_subject)) if self.filter_subject else None
        return [m for seq in seqs if (m := got.pop(seq, None)) is not None and (keep is None or keep(m))]

    async def _from_leader(self, seqs: list[int]) -> dict[int, RawMessage]:
        """Messages `seqs` as the stream leader has them, LEADER_GETS at a time (a replica far
        behind misses a whole chunk; the server's API queue is every client's). Those it does
        not hold are gone, with `prove_gone`, only where one reply shows it: the first message
        at or after one, asked again, lies past it, or a stream info shows it removed or
        deleted (`require_shown_gone`). A leader holding less than the stream did raises
        RangeNotHeld, and so does one whose answers show nothing (a deposed leader that has not
        stepped down yet can answer after a stream info from the new one): read again later."""
        limit = asyncio.Semaphore(LEADER_GETS)

        async def get(seq: int, or_next: bool) -> RawMessage | None:
            async with limit:
                m = await leader_message(self.nc, self.leader_get_stream(), seq, ">" if or_next else "")
            if m is not None and (m.seq < seq if or_next else m.seq != seq):
                raise wire.WireError(f"the stream leader answered sequence {seq} with sequence {m.seq}")
            return m

        async def all_of(wanted: list[int], or_next: bool = False) -> dict[int, RawMessage | None]:
            try:
                async with asyncio.TaskGroup() as group:
                    tasks = {seq: group.create_task(get(seq, or_next)) for seq in wanted}
            except ExceptionGroup as failed:
                raise failed.exceptions[0] from None
            return {seq: t.result() for seq, t in tasks.items()}

        found = await all_of(seqs)
        # Ascending, whatever order the misses came in: the leader must hold the highest of them.
        absent = sorted(seq for seq, m in found.items() if m is None)
        if absent:
            shown = await require_leader_holds(self.nc, self.stream, absent[-1])
            if not self.prove_gone:
                found.update(await all_of(absent))  # asked again: the leader may have changed
            else:
                unproven = []
                for seq, m in (await all_of(absent, or_next=True)).items():
                    if m is None:
                        unproven.append(seq)  # nothing from it on, in the answer: no proof either way
                    elif m.seq == seq:
                        found[seq] = m
                    # else: one answer holds a later message and not this one: it is gone
                if unproven:
                    await require_shown_gone(self.nc, self.stream, sorted(unproven), shown)
        return {seq: m for seq, m in found.items() if m is not None}

    def direct_get_subject(self) -> str:
        """Where single direct gets go (any replica answers)."""
        return f"$JS.API.DIRECT.GET.{self.stream}"

    def leader_get_stream(self) -> str:
        """Whose leader gives what the replicas lacked and where a range goes on: this stream's
        (a test's stand-in for a leader behind answers for another stream)."""
        return self.stream

    async def leader_get(self, seq: int) -> RawMessage | None:
        """Message `seq` from the stream leader, or with a filter the first matching one at or
        after it; None when there is none."""
        return await leader_message(self.nc, self.stream, seq, self.filter_subject)

    async def chunks(self, start: int, end: int) -> AsyncGenerator[list[RawMessage], None]:
        seq = start
        while seq < end:
            msgs = [m for m in await self.batch(seq, min(self.chunk_messages, end - seq)) if m.seq < end]
            if not msgs:
                # Nothing from the replica that answered (behind, or all gone): the leader says.
                m = await next_in_range(
                    self.nc,
                    self.stream,
                    self.filter_subject,
                    seq,
                    end,
                    self.prove_gone,
                    self.leader_get_stream(),
                )
                if m is None:
                    return
                msgs = [m]
            yield msgs
            seq = msgs[-1].seq + 1


async def leader_message(
    nc: ReplicatorClient, stream: str, seq: int, next_by_subject: str = ""
) -> RawMessage | None:
    """From the stream leader: message `seq`, or with `next_by_subject` the first message at or
    after `seq` on a matching subject (`>`: any); None when there is none."""
    req: dict[str, object] = {"seq": seq}
    if next_by_subject:
        req["next_by_subj"] = next_by_subject
    return await _leader_get(nc, stream, req)


async def leader_last_on_subject(nc: ReplicatorClient, stream: str, subject: str) -> RawMessage | None:
    """From the stream leader: the last message on `subject` (None when there is none)."""
    return await _leader_get(nc, stream, {"last_by_subj": subject})


async def _leader_get(nc: ReplicatorClient, stream: str, req: dict[str, object]) -> RawMessage | None:
    resp = await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps(req).encode(), timeout=10)
    body = json.loads(resp.data)
    if "error" in body:
        if body["error"].get("code") == 404:
            return None
        raise APIError.from_error(body["error"])
    m = body["message"]
    block = base64.b64decode(m["hdrs"]) if m.get("hdrs") else b""
    return RawMessage(
        seq=int(m["seq"]),
        subject=m["subject"],
        ts_ns=rfc3339_to_ns(m["time"]),
        headers=wire.parse_headers(block) or None,
        data=base64.b64decode(m.get("data") or ""),
    )


async def stream_info(nc: Client, stream: str) -> StreamInfo | None:
    """The stream's info, None when there is no such stream."""
    try:
        return await nc.jetstream().stream_info(stream)
    except NotFoundError:
        return None


async def stream_info_doc(
    nc: Client, stream: str, request: bytes = b"", timeout: float = 5.0
) -> dict[str, Any] | None:
    """The stream's info as the server's JSON, with what nats-py's stream_info cannot ask for
    or drops (the deleted sequences `request` may ask for, the answering server's clock `ts`);
    None when there is no such stream. Other refusals raise APIError."""
    reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", request, timeout=timeout)
    doc: dict[str, Any] = json.loads(reply.data)
    if "error" in doc:
        try:
            APIError.from_error(doc["error"])  # raises the error's own class
        except NotFoundError:
            return None
    return doc


async def next_in_range(
    nc: ReplicatorClient,
    stream: str,
    filter_subject: str,
    seq: int,
    end: int,
    prove_gone: bool = False,
    gets_from: str = "",
) -> RawMessage | None:
    """A reader found nothing more from `seq` on, short of `end`: the next message of the range
    as the stream leader has it, or None once the leader shows the rest of the range is gone
    (deleted, expired, or not matching the filter). A range is planned from what the stream
    held; a leader that holds less than that (just elected, still applying its log) raises
    RangeNotHeld, so the range is read again rather than taken as ending early. `prove_gone`:
    see DirectReader. `gets_from`: the stream whose leader answers the gets, if not `stream` (a
    test's leader behind)."""
    m = await leader_message(nc, gets_from or stream, seq, filter_subject or ">")
    if m is not None:
        return m if m.seq < end else None  # the rest of the range is gone: the leader has later ones
    shown = await require_leader_holds(nc, stream, end - 1)
    # The stream holds the whole range (asked once more: the leader may have changed between
    # the two requests). A later message in the answer shows the rest of the range gone.
    m = await leader_message(nc, gets_from or stream, seq, filter_subject or ">")
    if m is not None:
        return m if m.seq < end else None
    if prove_gone and not filter_subject:
        # Nothing from seq on, in an answer that may come from a leader behind, or deposed and
        # not stepped down yet: the range's rest is gone only where a stream info shows it.
        # (With a filter, "nothing matching from seq on" has no such proof short of reading
        # the rest of the range: docs/faults.md, "Known gaps".)
        await require_shown_gone(nc, stream, range(seq, end), shown)
    return None


async def require_leader_holds(nc: ReplicatorClient, stream: str, seq: int) -> StreamState:
    """The stream leader lacked messages a read was planned to give: they are gone only if it
    holds the stream up to `seq` (the highest of them); a leader holding less (just elected on
    a server older than 2.11, still applying its log: docs/design.md) raises RangeNotHeld, so
    the read is made again rather than taken as ending early. Returns the state it showed."""
    info = await stream_info(nc, stream)
    last = int(info.state.last_seq) if info is not None else 0
    if info is None or last < seq:
        raise RangeNotHeld(
            f"stream {stream}: its leader holds sequences up to {last}, short of {seq} that this "
            "read was planned to: read again once it has caught up"
        )
    return info.state


async def require_shown_gone(
    nc: ReplicatorClient, stream: str, seqs: Sequence[int], shown: StreamState
) -> None:
    """A server answered that it holds nothing at and after each of `seqs` (ascending: a list,
    or a range's rest). It may be behind, or a stream leader deposed but not yet stepped down
    whose answer came after a stream info from the new one, so the answer proves nothing. They
    are gone only where one reply shows each removed (a first sequence above it: `shown`, a
    stream info the caller already had, is one) or deleted (in a stream info's deleted list,
    asked for when it can hold them all and has at most DELETED_DETAILS_MAX); else
    RangeNotHeld: read again (a message stored later makes the next try's answer a proof)."""
    left = seqs[bisect.bisect_left(seqs, int(shown.first_seq)) :]  # below it: removed
    if not left:
        return
    if len(left) <= int(shown.num_deleted or 0) <= DELETED_DETAILS_MAX:
        state = await _stream_state_with_deleted(nc, stream)
        left = left[bisect.bisect_left(left, int(state.get("first_seq", 0))) :]
        deleted = set(state.get("deleted") or ())
        missing = next((seq for seq in left if seq not in deleted), None)
        if missing is None:
            return
        left = [missing]
    raise RangeNotHeld(
        f"stream {stream}: the server that answered holds nothing at or after sequence {left[0]}, "
        "and no stream info shows it removed or deleted: read again"
    )


async def _stream_state_with_deleted(nc: ReplicatorClient, stream: str) -> dict[str, Any]:
    """The `state` of the stream's info with its deleted sequences, as its leader gives it
    (nats-py's stream_info cannot ask for them); RangeNotHeld if there is no such stream now
    (its creation check says why)."""
    doc = await stream_info_doc(nc, stream, b'{"deleted_details":true}', timeout=10)
    if doc is None:
        raise RangeNotHeld(f"stream {stream} was not found by its info: read again")
    state: dict[str, Any] = doc.get("state") or {}
    return state


@dataclass
class ConsumerReader:
    """For streams without `allow_direct`: an ephemeral, unacknowledged pull consumer from the
    range start, its deliveries read raw (every header value kept); chunks are bounded by
    message count only. Each message's reply subject says how many matching messages are still
    pending, so the reader knows when the stream holds no more for it, even when the filter
    matches nothing in the rest of the range."""

    nc: ReplicatorClient
    stream: str
    filter_subject: str = ""
    chunk_messages: int = 1000
    # How long one pull request waits for messages before the server ends it.
    wait_s: float = 2.0
    prove_gone: bool = False  # as DirectReader's

    async def _create(self, name: str, start: int) -> None:
        # Named here, not by the server: a read cancelled while the create is in flight still
        # knows what to delete (else the consumer stays until its inactive_threshold).
        cfg: dict[str, object] = {
            "name": name,
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": start,
            "ack_policy": "none",
            "inactive_threshold": 30_000_000_000,
            "mem_storage": True,
            "num_replicas": 1,
        }
        if self.filter_subject:
            cfg["filter_subject"] = self.filter_subject
        resp = await self.nc.request(
            f"$JS.API.CONSUMER.CREATE.{self.stream}.{name}",
            json.dumps({"stream_name": self.stream, "config": cfg}).encode(),
            timeout=10,
        )
        body = json.loads(resp.data)
        if "error" in body:
            raise APIError.from_error(body["error"])

    async def _delete(self, consumer: str) -> None:
        # Best effort: an ephemeral consumer goes by itself after its inactive_threshold.
        with contextlib.suppress(Exception):
            await self.nc.request(f"$JS.API.CONSUMER.DELETE.{self.stream}.{consumer}", b"", timeout=5)

    async def _pull(self, consumer: str, n: int) -> tuple[list[RawMessage], bool]:
        """(messages, whether more are pending) of one pull request for up to n messages."""
        inbox = self.nc.new_inbox()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        out: list[RawMessage] = []
        pending = [1]

        def on_delivery(subject: bytes, reply: bytes, data: bytes, block: bytes | None) -> None:
            if done.done():
                return
            code = wire.status_code(block)
            if code is not None:
                # 404/408: nothing (more) within the wait (the range's end, or a leader away);
                # 409: the consumer went away (its leader changed, or it was deleted).
                if code == "409":
                    done.set_exception(
                        ReadInterrupted(f"pull from consumer {consumer}: status 409; read again")
                    )
                else:
                    done.set_result(None)
                return
            try:
                seq, ts_ns, left = wire.parse_ack_subject(reply.decode())
                message = RawMessage(
                    seq, wire.wire_text(subject), ts_ns, wire.parse_headers(block) or None, data
                )
            except Exception as e:  # any delivery it cannot read fails the read: never a gap
                done.set_exception(e)
                return
            out.append(message)
            pending[0] = left
            if left == 0 or len(out) >= n:
                done.set_result(None)

        sub = await self.nc.raw_subscribe(inbox, on_delivery)
        # No max_bytes: a message larger than it would end the request with nothing read.
        req = {"batch": n, "expires": int(self.wait_s * 1e9)}
        try:
            await self.nc.publish(
                f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{consumer}", json.dumps(req).encode(), reply=inbox
            )
            await await_replies(
                self.nc,
                done,
                self.wait_s + REQUEST_TIMEOUT_S,
                f"pull from consumer {consumer} of stream {self.stream}",
                out.__len__,
            )
        finally:
            await self.nc.raw_unsubscribe(sub)
        return out, pending[0] > 0 and len(out) > 0

    async def chunks(self, start: int, end: int) -> AsyncGenerator[list[RawMessage], None]:
        consumer = f"sr_read_{secrets.token_hex(8)}"
        try:
            await self._create(consumer, start)
            seq = start
            while seq < end:
                msgs, more = await self._pull(consumer, min(self.chunk_messages, end - seq))
                in_range = [m for m in msgs if m.seq < end]
                if in_range:
                    yield in_range
                    seq = in_range[-1].seq + 1
                if len(in_range) < len(msgs):
                    return  # past the range
                if not more and seq < end:
                    # Nothing more came (the stream holds no more that match, or an empty pull
                    # while its leader was away): the leader says which.
                    m = await next_in_range(
                        self.nc, self.stream, self.filter_subject, seq, end, self.prove_gone
                    )
                    if m is None:
                        return
                    raise ReadInterrupted(
                        f"pull from consumer {consumer} of stream {self.stream} ended before sequence "
                        f"{m.seq}, which the stream holds; read again"
                    )
        finally:
            await self._delete(consumer)


async def read_chunks(
    nc: ReplicatorClient,
    stream: str,
    start: int,
    end: int,
    *,
    direct: bool,
    filter_subject: str = "",
    chunk_messages: int = 5000,
    chunk_bytes: int = 16 << 20,
    prove_gone: bool = False,
) -> AsyncGenerator[list[RawMessage], None]:
    """Messages with start <= seq < end (matching filter_subject), in order, in chunks.
    `prove_gone`: see DirectReader (the source's reads ask for it)."""
    reader: DirectReader | ConsumerReader
    if direct:
        reader = DirectReader(nc, stream, filter_subject, chunk_messages, chunk_bytes, prove_gone)
    else:
        reader = ConsumerReader(nc, stream, filter_subject, chunk_messages, prove_gone=prove_gone)
    # Closed with this generator, also when its caller stops early: a consumer is deleted now,
    # not whenever the event loop gets round to it (or never, its connection closed by then).
    async with contextlib.aclosing(reader.chunks(start, end)) as chunks:
        async for chunk in chunks:
            yield chunk
