"""The replicator's NATS client: nats-py's, plus raw subscriptions and pre-encoded publishes.

This is the one place that depends on nats-py's internals (`_process_msg`, `_process_pong`,
`_send_command`, `_flush_queue`, `_max_payload`, and for a reconnect `_attempt_reconnect`,
`_pending` and `_transport`); nats-py is pinned to 2.16.x. tests/unit/nats/test_client.py
checks what goes over the wire against nats-py's own publish;
tests/integration/nats/test_reconnect.py that nothing unsent crosses a reconnect.

A raw subscription hands each message's wire bytes to a plain function, skipping the header
dict, `Msg`, queue and callback task nats-py makes per message (over half the cost of reading a
stream when profiled). It is still an ordinary nats-py subscription, so it is restored on
reconnect. Its messages are also cut from the read buffer by `RawFirstParser`, not by nats-py's
regular-expression parser and a coroutine per message (together ~45 % of the driver's time
while copying, profiled with py-spy).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import struct
from collections.abc import Callable, Sequence

from nats import errors
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.errors import ProtocolError
from nats.protocol.parser import AWAITING_CONTROL_LINE, MAX_CONTROL_LINE_SIZE, Parser

from replicator.nats import wire

log = logging.getLogger(__name__)

# How nats-py reports the server's refusal of a publish or a subscription (it lowercases the
# server's -ERR): 'nats: permissions violation for subscription to "a.>"'. A subscription
# limit's refusal says 'maximum subscriptions exceeded'.
PERMISSION_DENIED = "nats: permissions violation"
SUBSCRIPTION_DENIED = f"{PERMISSION_DENIED} for subscription to "
SUBSCRIPTIONS_EXCEEDED = "maximum subscriptions"

# Called with (subject, reply, payload, raw header block or None) of each message.
RawHandler = Callable[[bytes, bytes, bytes, bytes | None], None]


def _deliver(
    handler: RawHandler, subject: bytes, reply: bytes, payload: bytes, headers: bytes | None
) -> None:
    """Hand a message to its raw handler. A handler that fails loses that message only: raised
    into the parser, it would end nats-py's read loop, and the connection would hear nothing
    until its pings ran out. So each handler decides what a message it cannot read means (a
    reader fails its read, never leaving a gap; a publisher's lost ack times its batch out)."""
    try:
        handler(subject, reply, payload, headers)
    except Exception:
        _handler_failed(subject)


def _handler_failed(subject: bytes) -> None:
    log.exception(
        "a raw subscription's handler failed on a message to %s; it is dropped",
        subject.decode(errors="replace"),
    )


class RawFirstParser(Parser):
    """nats-py's parser, except that MSG and HMSG of raw subscriptions are cut from the buffer
    here, in a loop without regular expressions or awaits, and handed straight to their handler.
    At anything else (PING, INFO, -ERR, a message for an ordinary subscription) the rest of the
    buffer goes to nats-py's own parser. A raw message split across reads waits in the buffer
    until it is whole (nats-py would take it, and then every read after it, on its slow path)."""

    nc: ReplicatorClient

    def reset(self) -> None:
        super().reset()
        self.raw_wait = 0  # bytes the raw message at the head of the buffer needs to be whole

    async def parse(self, data: bytes = b"") -> None:
        self.buf.extend(data)
        if self.state == AWAITING_CONTROL_LINE:
            if len(self.buf) < self.raw_wait:
                return
            done, wait = self._cut_raw_messages()
            if done:
                del self.buf[:done]
            if wait:
                return
        if self.buf:
            await super().parse()

    def _cut_raw_messages(self) -> tuple[int, bool]:
        """Hands every whole raw-subscription message at the head of the buffer to its handler.
        Returns how many bytes they took, and whether what follows is a raw message (or a
        control line) still arriving, to be left in the buffer for the next read."""
        buf, pos, self.raw_wait = self.buf, 0, 0
        size = len(buf)
        handlers, stats = self.nc._raw_handlers, self.nc.stats
        with memoryview(buf) as view:  # slices of it are copied once, not twice
            while pos < size:
                eol = buf.find(b"\r\n", pos, pos + MAX_CONTROL_LINE_SIZE)
                if eol < 0:  # no whole control line yet; nats-py decides about an overlong one
                    return pos, size - pos < MAX_CONTROL_LINE_SIZE
                parts = bytes(view[pos:eol]).split()
                op, n = parts[0] if parts else b"", len(parts)
                if op == b"HMSG" and n in (5, 6):
                    header_size, total = int(parts[-2]), int(parts[-1])
                elif op == b"MSG" and n in (4, 5):
                    header_size, total = 0, int(parts[-1])
                else:
                    return pos, False  # not a message: nats-py's parser takes it
                handler = handlers.get(int(parts[2]))
                if handler is None:
                    return pos, False
                start = eol + 2
                end = start + total
                if end + 2 > size:
                    self.raw_wait = end + 2 - pos
                    return pos, True
                if view[end : end + 2] != b"\r\n" or header_size > total:
                    raise ProtocolError(f"nats: malformed {op.decode()}")
                reply = parts[3] if n == (6 if op == b"HMSG" else 5) else b""
                headers = bytes(view[start : start + header_size]) if header_size else None  # as nats-py's
                payload = bytes(view[start + header_size : end])
                stats["in_msgs"] += 1
                stats["in_bytes"] += len(payload)
                try:
                    handler(parts[1], reply, payload, headers)
                except Exception:  # see _deliver
                    _handler_failed(parts[1])
                pos = end + 2
        return pos, False


class ReplicatorClient(Client):
    def __init__(self) -> None:
        super().__init__()
        self._ps = RawFirstParser(self)
        self._raw_handlers: dict[int, RawHandler] = {}
        # Times the connection was lost (counted by open_connection's disconnected callback):
        # a publisher waiting for acks gives up at once when it moves.
        self.disconnects = 0
        # Subjects whose refused subscription the subscriber reports itself (the doorbell's):
        # the connection's error callback leaves those to it, so a refusal is one warning.
        self.refusals_reported_by_subscriber: set[str] = set()

    def refusal_reported_by_subscriber(self, e: BaseException) -> bool:
        text = str(e)
        return text.startswith(SUBSCRIPTION_DENIED) and any(
            f'"{subject.lower()}"' in text for subject in self.refusals_reported_by_subscriber
        )

    async def _attempt_reconnect(self) -> None:
        # What the lost connection had not sent must never reach a server after what a new
        # connection sends: nats-py would write its pending buffer on the new connection,
        # after whatever the old socket lost (later copies stored before earlier ones that a
        # retry publishes again), and closing the old socket still delivers its buffered
        # bytes if the link comes back. So the buffer is dropped and the socket reset; every
        # publisher sees the disconnect and publishes again what was not acknowledged.
        self.discard_unsent()
        await super()._attempt_reconnect()

    def discard_unsent(self) -> None:
        """Drop everything not yet sent (the pending buffer, the socket's buffers: the socket is
        reset) and let the connection be made again. For a reconnect, and for a fence: a leader
        whose lease ended sends nothing more, whatever its connection had queued."""
        self._pending = []
        self._pending_data_size = 0
        writer = getattr(self._transport, "_io_writer", None)
        if writer is None:
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # SO_LINGER 0: close with a reset, dropping the send buffer
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def flush_in_order(self, timeout: float) -> None:
        """A flush whose PONG says the server has every command sent before it. nats-py's flush
        writes its PING straight to the socket, ahead of commands still queued for its flusher
        task (a SUB, an UNSUB): under load the PONG came back before the server held a new
        subscription, so a message published from another connection went unheard. While the
        connection is being made again nats-py's flush may return with no PONG: that raises
        ConnectionReconnectingError, as does a flush begun then."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not self.is_connected:
            raise errors.ConnectionReconnectingError
        if self._flush_queue is not None and self._flusher_task is not None and not self._flusher_task.done():
            # The flusher writes what was queued before it, then sets it.
            written: asyncio.Future[None] = loop.create_future()
            await asyncio.wait_for(self._flush_queue.put(written), timeout)
            await asyncio.wait_for(written, max(0.0, deadline - loop.time()))
        else:
            await self._flush_pending()  # no flusher: nats-py writes inline
        # nats-py takes whole seconds: within a second of the deadline at most.
        await self.flush(max(1, math.ceil(deadline - loop.time())))
        if not self.is_connected:
            raise errors.ConnectionReconnectingError

    async def _process_pong(self) -> None:
        # A PONG answers the oldest PING. nats-py leaves a flush that timed out in that list,
        # cancelled: setting its result raised into the read loop and ended it, and the
        # connection heard nothing until its pings ran out (tests/integration/nats/test_flush.py).
        if self._pongs:
            future = self._pongs.pop(0)
            if not future.done():
                future.set_result(True)
            self._pongs_received += 1
            self._pings_outstanding = 0

    async def raw_subscribe(self, subject: str, handler: RawHandler) -> Subscription:
        sub = await self.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
        self._raw_handlers[sub._id] = handler
        return sub

    async def raw_unsubscribe(self, sub: Subscription) -> None:
        self._raw_handlers.pop(sub._id, None)
        await sub.unsubscribe()

    def _check_sendable(self) -> None:
        """Raise unless a command written now goes out on the connection as it is."""
        if self.is_closed:
            raise errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        if not self.is_connected:
            # Not buffered for after the reconnect (nats-py's publish would): it would land
            # after whatever the dropped connection lost. The caller retries the batch.
            raise errors.ConnectionReconnectingError

    async def publish_encoded(self, subject: str, reply: str, header_lines: bytes, payload: bytes) -> None:
        """`publish` with the header lines already encoded (`wire.encode_read_header_lines`,
        or in tests `encode_header_lines`): the sink publishes thousands of messages whose headers
        differ in two values, and nats-py's per-message header encoding was ~16 % of its time
        when profiled."""
        try:
            wire.check_subject(subject, reply)
        except wire.WireError:
            raise errors.BadSubjectError from None
        self._check_sendable()
        size = len(payload)
        # The server counts the header block too, and closes a connection that exceeds it.
        if size + len(header_lines) + wire.HEADER_FRAME > self._max_payload:
            raise errors.MaxPayloadError
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += size
        await self._send_command(wire.hpub(subject, reply, header_lines, payload))
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def publish_requests(self, subject: str, requests: Sequence[tuple[str, bytes]]) -> None:
        """Requests to `subject`, each (reply subject, payload), written as one command buffer: a
        reader asks for thousands of messages one by one at once (direct gets of copies far
        apart), and nats-py's publish per request would cost more than the request itself."""
        for reply, _ in requests:
            try:
                wire.check_subject(subject, reply)
            except wire.WireError:
                raise errors.BadSubjectError from None
        self._check_sendable()
        self.stats["out_msgs"] += len(requests)
        self.stats["out_bytes"] += sum(len(payload) for _, payload in requests)
        await self._send_command(b"".join(wire.pub(subject, reply, payload) for reply, payload in requests))
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
        _deliver(handler, subject, reply, data, headers)
