"""The replicator's NATS client: nats-py's, plus raw subscriptions and pre-encoded publishes.

This is the one place that depends on nats-py's internals (`_process_msg`, `_send_command`,
`_flush_queue`, `_max_payload`); nats-py is pinned to
2.16.x and tests/unit/nats/test_client.py checks what goes over the wire against nats-py's own
publish.

A raw subscription hands each message's wire bytes to a plain function, skipping the header
dict, `Msg`, queue and callback task nats-py makes per message (over half the cost of reading a
stream when profiled). It is still an ordinary nats-py subscription, so it is restored on
reconnect.
"""

from __future__ import annotations

from collections.abc import Callable

from nats import errors
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from replicator.nats import wire

# Called with (subject, reply, payload, raw header block or None) of each message.
RawHandler = Callable[[bytes, bytes, bytes, bytes | None], None]


class ReplicatorClient(Client):
    def __init__(self) -> None:
        super().__init__()
        self._raw_handlers: dict[int, RawHandler] = {}
        # Times the connection was lost (counted by open_connection's disconnected callback):
        # a publisher waiting for acks gives up at once when it moves.
        self.disconnects = 0

    async def raw_subscribe(self, subject: str, handler: RawHandler) -> Subscription:
        sub = await self.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
        self._raw_handlers[sub._id] = handler
        return sub

    async def raw_unsubscribe(self, sub: Subscription) -> None:
        self._raw_handlers.pop(sub._id, None)
        await sub.unsubscribe()

    async def publish_encoded(self, subject: str, reply: str, header_lines: bytes, payload: bytes) -> None:
        """`publish` with the header lines already encoded (`wire.encode_header_lines`): the
        sink publishes thousands of messages whose headers differ in two values, and nats-py's
        per-message header encoding was ~16 % of its time when profiled."""
        try:
            wire.check_subject(subject, reply)
        except wire.WireError:
            raise errors.BadSubjectError from None
        if self.is_closed:
            raise errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        size = len(payload)
        # The server counts the header block too, and closes a connection that exceeds it.
        if size + len(header_lines) + wire.HEADER_FRAME > self._max_payload:
            raise errors.MaxPayloadError
        if not self.is_connected:
            # Not buffered for after the reconnect (nats-py's publish would): it would land
            # after whatever the dropped connection lost. The caller retries the batch.
            raise errors.ConnectionReconnectingError
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += size
        await self._send_command(wire.hpub(subject, reply, header_lines, payload))
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        handler = self._raw_handlers.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]  # its parser passes None too
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        handler(subject, reply, data, headers)
