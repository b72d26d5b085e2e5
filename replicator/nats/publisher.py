"""Pipelined JetStream publishing with every ack checked, at a lower cost per message than
nats-py's `publish_async`. It needs the replicator's client (`open_connection`), whose raw
subscriptions and pre-encoded publishes it uses.

`publish_async` creates a future, a NUID and a `PubAck` dataclass per message and parses each
ack with `json.loads`; profiled, that was most of the sink's CPU. Here one wildcard reply
subscription receives all acks of a batch (`<inbox>.<index>`), an ack is checked with byte
searches, and only an error is parsed in full. Publishing stops to wait when `max_pending`
acks are outstanding, so a slow target applies back-pressure instead of filling memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from replicator.nats.client import ReplicatorClient
from replicator.nats.wire import status_code


class PublishError(RuntimeError):
    pass


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
    # Every message the target did not store, by index.
    failures: list[Refusal] = field(default_factory=list)

    def first_failure(self) -> Refusal | None:
        return min(self.failures, key=lambda r: r.index) if self.failures else None


class _Batch:
    def __init__(self, stream: str, max_pending: int, generation: str) -> None:
        self.generation = generation
        self.stream_marker = f'"stream":"{stream}"'.encode()
        self.max_pending = max_pending
        self.sent = 0
        self.acked = 0
        self.all_sent = False
        self.outcome = PublishOutcome()
        self.room = asyncio.Event()
        self.room.set()
        self.all_acked = asyncio.Event()

    def on_ack(self, index: int, data: bytes, status: str | None) -> None:
        o = self.outcome
        if status:  # 503: no stream listens on the subject
            o.failures.append(Refusal(index, f"no stream stored it (status {status})"))
        elif b'"error"' in data:
            try:
                err = json.loads(data)["error"]
                o.failures.append(
                    Refusal(
                        index,
                        f"{err.get('description', err)} (code {err.get('err_code')})",
                        err.get("err_code"),
                    )
                )
            except (ValueError, KeyError, AttributeError):
                o.failures.append(Refusal(index, data[:200].decode(errors="replace")))
        elif self.stream_marker not in data:
            stream = json.loads(data).get("stream")
            o.failures.append(Refusal(index, f"stored in stream {stream}"))
        elif b'"duplicate"' in data and json.loads(data).get("duplicate"):
            o.duplicates += 1
        self.acked += 1
        if self.sent - self.acked < self.max_pending:
            self.room.set()
        if self.all_sent and self.acked == self.sent:
            self.all_acked.set()


class PipelinedPublisher:
    """Publishes batches to one target stream on one connection, in order."""

    def __init__(self, nc: ReplicatorClient, stream: str, max_pending: int = 4000) -> None:
        self.nc = nc
        self.stream = stream
        self.max_pending = max_pending
        # Messages the target stored through this publisher, failed batches included: copies
        # landing again after a fault, for the runner's backoff.
        self.landed = 0
        self._inbox = ""
        self._batch: _Batch | None = None
        self._generation = 0  # in every reply subject: a late ack of an earlier batch is ignored

    async def _ensure_subscribed(self) -> None:
        if self._inbox:
            return
        self._inbox = self.nc.new_inbox()
        cut = len(self._inbox) + 1

        def on_ack(subject: bytes, _reply: bytes, data: bytes, raw_headers: bytes | None) -> None:
            batch = self._batch
            generation, _, index = subject.decode()[cut:].partition(".")
            if batch is not None and generation == batch.generation and int(index) < batch.sent:
                batch.on_ack(int(index), data, status_code(raw_headers))  # an ack has no headers

        await self.nc.raw_subscribe(f"{self._inbox}.*.*", on_ack)

    async def publish(self, messages: Iterable[tuple[str, bytes, bytes]], timeout: float) -> PublishOutcome:
        """Publish (subject, data, header lines encoded by `wire.encode_header_lines`) in order; returns
        once every one is acknowledged. Raises PublishError if not all were acknowledged within
        `timeout`."""
        await self._ensure_subscribed()
        self._generation += 1
        batch = _Batch(self.stream, self.max_pending, str(self._generation))
        self._batch = batch
        prefix = f"{self._inbox}.{batch.generation}."
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
                            f"{batch.sent} publishes to stream {self.stream} unacknowledged"
                        ) from None

        try:
            for subject, data, headers in messages:
                if batch.sent - batch.acked >= batch.max_pending:
                    batch.room.clear()
                    await wait(batch.room)
                # Counted before the await: its ack may be handled while publish() yields.
                index = batch.sent
                batch.sent += 1
                await publish(subject, prefix + str(index), headers, data)
            batch.outcome.published = batch.sent
            batch.all_sent = True
            if batch.acked < batch.sent:
                await wait(batch.all_acked)
        except TimeoutError:
            raise PublishError(
                f"{batch.sent - batch.acked} of {batch.sent} publishes to stream {self.stream} were not "
                f"acknowledged within {timeout:.0f}s"
            ) from None
        finally:
            self._batch = None
            self.landed += batch.acked - len(batch.outcome.failures)
        return batch.outcome
