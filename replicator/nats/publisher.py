"""Pipelined JetStream publishing with every ack checked, at a lower cost per message than
nats-py's `publish_async`. It needs the replicator's client (`open_connection`), whose raw
subscriptions and pre-encoded publishes it uses.

`publish_async` creates a future, a NUID and a `PubAck` dataclass per message and parses each
ack with `json.loads`; profiled, that was most of the sink's CPU. Here one wildcard reply
subscription receives all acks of a batch (`<inbox>.<index>`), an ack is checked with byte
searches, and only an error is parsed in full. Publishing stops to wait when `max_pending`
messages are unacknowledged, so a slow target applies back-pressure instead of filling memory.

With `ack_every` > 1 only every so many messages, and the last, ask for an ack. That is for
copies chained by `Nats-Expected-Last-Msg-Id` (replicator.spark.sink): the target stores a
chained copy only right after the copy before it, so an ack that says stored vouches for every
copy before it in the batch. The target then builds and sends one ack where it built hundreds,
which cost it 1.3 of 7 µs per message (`python -m bench.ack_cost`), and the driver reads one. A
failed ack says only that something at or before it was not stored, so the outcome is then not
`exact`: the caller finds where the copies end from the target's tail.

With `fast_batch` one call is one NATS fast-ingest batch (nats-server 2.14+, a target stream with
`allow_batched`; ADR-50): each message's reply subject carries the batch's id, its place in it
and whether it ends it, and the server acks every so many messages of its own accord. In gap
mode "fail" an ack vouches for every message before it, and the first message refused or lost
ends the batch: nothing after it is stored, so the outcome stays `exact` with sparse acks, on a
clustered target too, where a chain by sequence alone cannot vouch (replicator.spark.sink).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from nats.aio.subscription import Subscription

from replicator.nats.client import ReplicatorClient
from replicator.nats.wire import ack_seq, status_code


class PublishError(RuntimeError):
    pass


# What to do about a refusal whose cause is the target stream's configuration, by JetStream
# error code: said in the refusal's one line, so the operator need not look the code up.
FIXES = {
    10166: "allow them on the target stream (allow_msg_ttl), as on the source",
}


def refusal_reason(err: Any) -> str:
    """One line for a JetStream publish error (`{"code", "err_code", "description"}`): its
    description and code, and the fix where it is the target's configuration."""
    if not isinstance(err, dict):
        return str(err)
    code = err.get("err_code")
    fix = FIXES.get(code) if isinstance(code, int) else None
    return f"{err.get('description', err)} (code {code})" + (f": {fix}" if fix else "")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A message the target did not store: its index in the batch, why, and JetStream's error
    code when the server gave one."""

    index: int
    reason: str
    code: int | None = None


@dataclass
class PublishOutcome:
    published: int = 0
    duplicates: int = 0
    # Every message the target did not store, by index (with sparse acks: every acked one).
    failures: list[Refusal] = field(default_factory=list)
    # Whether every message was acknowledged, so that the first failure is where the stored
    # messages end; with sparse acks a failure may stand for an earlier, unacknowledged one.
    exact: bool = True
    # Messages the acks say the target stored.
    stored: int = 0
    # A fast batch's: the stream sequence its final ack names (0: none, or not a fast batch).
    last_seq: int = 0
    # The last message (by index) an ack said was stored now (not a duplicate), and the stream
    # sequence it named (-1 and 0: none; not for fast batches): where one of them is known to be.
    top_index: int = -1
    top_seq: int = 0

    def first_failure(self) -> Refusal | None:
        return min(self.failures, key=lambda r: r.index) if self.failures else None


# The most messages a fast batch's server may let go between two acks (it starts there, and
# lowers it while other fast batches write to the same stream).
FAST_BATCH_FLOW = 500
FAST_BATCH_SUFFIX = ".$FI"
_FAST_START, _FAST_APPEND, _FAST_COMMIT = 0, 1, 2


# For messages whose stream is not known in advance (advisories: whichever stream on the source
# cluster holds their subject).
ANY_STREAM = None


class _Batch:
    def __init__(
        self,
        stream: str | None,
        max_pending: int,
        generation: str,
        sparse: bool,
        seqs: dict[int, int] | None = None,
    ) -> None:
        self.generation = generation
        self.seqs = seqs
        self.stream = stream
        # An ack names the stream that stored the message; with ANY_STREAM any stream will do.
        self.stream_marker = f'"stream":"{stream}"'.encode() if stream is not None else b'"stream":"'
        # Messages answered (every one asks for an ack): a second reply to one, say from an
        # application subscribed to the subject, must not count as another message's ack.
        self.answered: set[int] | None = None if sparse else set()
        self.max_pending = max_pending
        self.sparse = sparse
        self.sent = 0
        self.acked = 0  # messages an ack has answered for (with sparse acks: up to the last ack)
        self.stored = 0  # messages an ack says the target stored
        self.all_sent = False
        # A fast batch ended without the server's final ack (an error it may not end the batch
        # on): where its copies end is read from the target's tail.
        self.inexact = False
        self.top: tuple[int, bytes] = (-1, b"")  # the last stored message's ack
        self.outcome = PublishOutcome()
        self.room = asyncio.Event()
        self.room.set()
        self.all_acked = asyncio.Event()

    def on_ack(self, index: int, data: bytes, status: str | None) -> None:
        if self.answered is not None:
            if index in self.answered:
                return
            self.answered.add(index)
        o = self.outcome
        if status:  # 503: no stream listens on the subject
            o.failures.append(Refusal(index, f"no stream stored it (status {status})"))
        elif b'"error"' in data:
            try:
                err = json.loads(data)["error"]
                o.failures.append(Refusal(index, refusal_reason(err), err.get("err_code")))
            except (ValueError, KeyError, AttributeError):
                o.failures.append(Refusal(index, data[:200].decode(errors="replace")))
        elif self.stream_marker not in data:
            stream = json.loads(data).get("stream")
            o.failures.append(Refusal(index, f"stored in stream {stream}"))
        else:
            duplicate = b'"duplicate"' in data and bool(json.loads(data).get("duplicate"))
            if duplicate:
                o.duplicates += 1
            if self.seqs is not None:
                self.seqs[index] = ack_seq(data)
            if index > self.top[0] and not duplicate:  # a duplicate's names an earlier message
                self.top = (index, data)  # its sequence read once, when the batch ends
            # A sparse ack that says stored vouches for the messages before it (the chain).
            self.stored = max(self.stored, index + 1) if self.sparse else self.stored + 1
        self.acked = max(self.acked, index + 1) if self.sparse else self.acked + 1
        if self.sent - self.acked < self.max_pending:
            self.room.set()
        if self.all_sent and self.acked == self.sent:
            self.all_acked.set()

    def on_fast_reply(self, index: int, data: bytes) -> None:
        """A fast batch's reply to its message `index`: a flow ack (every message up to the one it
        names is stored), a gap or an error (the batch ends before that message), or the PubAck
        that ends the batch (its count: how many of its first messages are stored)."""
        o = self.outcome
        if self.all_acked.is_set():
            return  # the batch has ended; later messages are refused as of an unknown batch
        if data.startswith(b'{"type":"ack"'):
            self._fast_stored(int(json.loads(data)["seq"]))
            return
        try:
            reply = json.loads(data)
        except ValueError:
            o.failures.append(Refusal(index, data[:200].decode(errors="replace")))
            return
        kind = reply.get("type")
        if kind == "gap":  # messages from last_seq on did not reach the stream (1-based)
            o.failures.append(Refusal(int(reply["last_seq"]) - 1, "lost on the way to the target"))
        elif kind == "err" or "error" in reply:
            err = reply.get("error") or {}
            where = int(reply["seq"]) - 1 if kind == "err" else index
            o.failures.append(Refusal(where, refusal_reason(err), err.get("err_code")))
            if kind is None:
                # The first message refused: the batch never began. A later one refused this way
                # (a limit, a full queue, a batch the server no longer knows) may be followed by
                # a gap and the final ack, or by the same refusal for every message after it
                # and none: the batch ends here, and the target's tail says what was stored.
                self.inexact = index > 0
                self._fast_end(self.stored if index else 0)
        elif "batch" in reply:  # the PubAck: the batch has ended
            if reply.get("duplicate"):
                o.duplicates += 1
            if reply.get("stream") != self.stream:
                o.failures.append(Refusal(index, f"stored in stream {reply.get('stream')}"))
            else:
                o.last_seq = int(reply.get("seq", 0))
            self._fast_end(int(reply.get("count", 0)))

    def _fast_stored(self, count: int) -> None:
        self.stored = max(self.stored, count)
        self.acked = max(self.acked, count)
        if self.sent - self.acked < self.max_pending:
            self.room.set()

    def _fast_end(self, count: int) -> None:
        self._fast_stored(count)
        if (
            count < self.sent
            and not self.inexact
            and not any(r.index <= count for r in self.outcome.failures)
        ):
            self.outcome.failures.append(Refusal(count, f"the target ended the batch after {count} messages"))
        self.acked = self.sent
        self.room.set()
        self.all_acked.set()


class PipelinedPublisher:
    """Publishes batches to one target stream on one connection, in order."""

    def __init__(self, nc: ReplicatorClient, stream: str | None, max_pending: int = 4000) -> None:
        self.nc = nc
        self.stream = stream
        self.where = f"stream {stream}" if stream is not None else "the streams of their subjects"
        self.max_pending = max_pending
        # Messages the target stored through this publisher, failed batches included: copies
        # landing again after a fault, for the runner's backoff.
        self.landed = 0
        self._inbox = ""
        self._subscription: Subscription | None = None
        self._batch: _Batch | None = None
        self._generation = 0  # in every reply subject: a late ack of an earlier batch is ignored

    async def _ensure_subscribed(self) -> None:
        if self._inbox:
            return
        self._inbox = self.nc.new_inbox()
        cut = len(self._inbox) + 1

        def on_ack(subject: bytes, _reply: bytes, data: bytes, raw_headers: bytes | None) -> None:
            batch = self._batch
            tokens = subject.decode()[cut:].split(".")
            if batch is None or tokens[0] != batch.generation:
                return
            if len(tokens) == 2 and int(tokens[1]) < batch.sent:
                batch.on_ack(int(tokens[1]), data, status_code(raw_headers))  # an ack has no headers
            elif len(tokens) == 7:  # <generation>.<batch id>.<flow>.fail.<1-based index>.<op>.$FI
                batch.on_fast_reply(int(tokens[4]) - 1, data)

        self._subscription = await self.nc.raw_subscribe(f"{self._inbox}.>", on_ack)

    async def close(self) -> None:
        """Unsubscribe its acks' inbox (the connection stays; a publisher dropped after a failed
        batch would otherwise leave one subscription behind per failure)."""
        sub, self._subscription = self._subscription, None
        if sub is not None and not self.nc.is_closed:
            await self.nc.raw_unsubscribe(sub)

    async def publish(
        self,
        messages: Iterable[tuple[str, bytes, bytes]],
        timeout: float,
        ack_every: int = 1,
        may_send: Callable[[], bool] | None = None,
        fast_batch: bool = False,
        seqs: dict[int, int] | None = None,
    ) -> PublishOutcome:
        """Publish (subject, data, header lines encoded by `wire`) in order; returns
        once every one is acknowledged. Raises PublishError if not all were acknowledged within
        `timeout`. With `ack_every` > 1 only every so many messages and the last ask for an ack;
        only for chained copies (see the module's text). `may_send` (a leader's lease) is asked
        right before each message goes to the connection; once it says no, nothing more does.
        `fast_batch`: the messages are one fast-ingest batch (the target stream allows it; see the
        module's text), `ack_every` then unused. `seqs` (every message acked): filled as the acks
        come with each stored message's stream sequence, by index; what it holds stays true when
        publish raises (those messages are stored)."""
        await self._ensure_subscribed()
        self._generation += 1
        ack_every = max(1, min(ack_every, self.max_pending // 2))  # room for the next ack to come
        sparse = ack_every > 1 or fast_batch
        if seqs is not None and sparse:
            raise ValueError("seqs needs every message acked (ack_every=1, no fast batch)")
        batch = _Batch(self.stream, self.max_pending, str(self._generation), sparse, seqs)
        self._batch = batch
        prefix = f"{self._inbox}.{batch.generation}."
        # A fast batch's id: unique among the stream's batches (the inbox is), at most 64 bytes.
        # The server acks every `flow` messages at most: fewer than the window, or it would stall.
        flow = max(1, min(FAST_BATCH_FLOW, self.max_pending // 2))
        fast_prefix = f"{prefix}{self._inbox.rsplit('.', 1)[-1]}g{batch.generation}.{flow}.fail."
        publish = self.nc.publish_encoded
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        disconnects = self.nc.disconnects

        async def wait(event: asyncio.Event) -> None:
            # Until `event`, the deadline (TimeoutError), or the connection dropping: the acks
            # outstanding then are lost, and waiting for them would only delay the retry.
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError
                try:
                    await asyncio.wait_for(event.wait(), min(left, 0.5))
                    return
                except TimeoutError:
                    if self.nc.disconnects != disconnects:
                        raise PublishError(
                            f"the connection to the target was lost with {batch.sent - batch.acked} of "
                            f"{batch.sent} publishes to {self.where} unacknowledged"
                        ) from None

        async def send(subject: str, data: bytes, headers: bytes, last: bool) -> None:
            if batch.sent - batch.acked >= batch.max_pending:
                batch.room.clear()
                await wait(batch.room)
            # Not on a connection other than the one the batch began on: what the old one lost
            # would land after this (a reconnect while this waited for room or a flush).
            if self.nc.disconnects != disconnects:
                raise PublishError(
                    f"the connection to the target was lost with {batch.sent - batch.acked} of "
                    f"{batch.sent} publishes to {self.where} unacknowledged"
                )
            if may_send is not None and not may_send():
                raise PublishError(f"not the leader any more: {batch.sent} publishes to {self.where} sent")
            # Counted before the await: its ack may be handled while publish() yields.
            index = batch.sent
            batch.sent += 1
            if fast_batch:
                op = _FAST_COMMIT if last else _FAST_START if index == 0 else _FAST_APPEND
                await publish(subject, f"{fast_prefix}{index + 1}.{op}{FAST_BATCH_SUFFIX}", headers, data)
                return
            acked = last or index % ack_every == ack_every - 1
            await publish(subject, prefix + str(index) if acked else "", headers, data)

        try:
            held: tuple[str, bytes, bytes] | None = None  # one behind: the last must ask an ack
            for message in messages:
                if held is not None:
                    await send(*held, last=False)
                if batch.all_acked.is_set():  # a fast batch the target ended: nothing more lands
                    held = None
                    break
                held = message
            if held is not None:
                await send(*held, last=True)
            batch.outcome.published = batch.sent
            batch.all_sent = True
            # A fast batch waits for the final ack that ends it, whatever its flow acks said.
            if batch.sent and (fast_batch or batch.acked < batch.sent):
                await wait(batch.all_acked)
            batch.outcome.exact = not batch.inexact if fast_batch else not batch.sparse
        except TimeoutError:
            raise PublishError(
                f"{batch.sent - batch.acked} of {batch.sent} publishes to {self.where} were not "
                f"acknowledged within {timeout:.0f}s"
            ) from None
        finally:
            self._batch = None
            self.landed += batch.stored
            batch.outcome.stored = batch.stored
        if batch.top[0] >= 0:
            batch.outcome.top_index, batch.outcome.top_seq = batch.top[0], ack_seq(batch.top[1])
        return batch.outcome
