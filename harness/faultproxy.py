"""A fault-injecting TCP proxy for tests and scenarios: put it between the replicator and a NATS
server, then add latency, cap bandwidth, cut the link, make it half-open (connections stay
up but nothing passes, as when a peer vanishes without closing), drop what the servers send
(publishes stored, acks lost) or stall it (nothing is read). The kernel here has no netem,
so faults are made in user space, on loopback.

It runs its own event loop on a thread, so synchronous tests drive it directly:

    with FaultProxy(upstream_port=server_port) as proxy:
        url = proxy.url          # give this to the replicator
        proxy.latency = 0.020    # 20 ms each way: a 40 ms round trip
        proxy.cut()              # every connection closed, new ones refused
        proxy.restore()
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import termios
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

from harness.localnats import free_port

_CHUNK = 64 * 1024


@dataclass(eq=False)  # one per connection, kept in a set
class _Link:
    """One client connection and its upstream connection."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # Set while the link is half-open: bytes are read and dropped, nothing is closed.
    dead: bool = False
    # Set while replies are dropped: the client's bytes reach the server, the server's are
    # read and dropped (acks lost on the way back); it stays set, as `dead` does.
    deaf: bool = False
    client_reader: asyncio.StreamReader | None = None
    # Bytes the client sent that a stall holds in this proxy (read as it began, not forwarded).
    held: int = 0

    def close(self) -> None:
        for w in (self.client, self.upstream):
            with contextlib.suppress(Exception):
                w.transport.abort()  # at once, as a cut cable (no FIN handshake to wait for)
        for t in self.tasks:
            t.cancel()


class FaultProxy:
    def __init__(
        self,
        upstream_port: int,
        upstream_host: str = "127.0.0.1",
        listen_port: int = 0,
        receive_buffer: int = 0,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        # The kernel's receive buffer of each accepted connection (0: the kernel's own, several
        # MB on loopback): how much a stalled link holds in flight.
        self.receive_buffer = receive_buffer
        self.port = listen_port or free_port()
        # Added to every chunk in each direction, seconds.
        self.latency = 0.0
        # Bytes per second in each direction (0: no cap).
        self.bandwidth = 0
        self._cut = False
        self._half_open = False
        self._deaf = False
        self._stalled = False
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"fault-proxy-{self.port}", daemon=True
        )
        self.connections = 0  # accepted so far

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    def stop(self) -> None:
        async def _stop() -> None:
            if self._server is not None:
                self._server.close()
            for link in list(self._links):
                link.close()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    # Faults -------------------------------------------------------------------------------

    def cut(self) -> None:
        """Close every connection at once and refuse new ones until `restore()`."""
        self._cut = True
        self._call(self._close_all)

    def half_open(self) -> None:
        """From now on nothing passes on the connections that are up, and they stay up; new
        connections are accepted and go nowhere either, until `restore()`. The connections
        that went dead stay dead after it, as a half-open TCP connection does: only a client
        that notices (its pings go unanswered) and reconnects gets through again."""
        self._half_open = True

        def _mark() -> None:
            for link in self._links:
                link.dead = True

        self._call(_mark)

    def drop_replies(self) -> None:
        """From now on what clients send reaches the server, and nothing the server sends
        reaches them, on the connections that are up and on new ones, until `restore()`: a
        publish is stored and its ack lost. The connections that went deaf stay so after it
        (as `half_open`'s stay dead): only a client that notices and reconnects hears again."""
        self._deaf = True

        def _mark() -> None:
            for link in self._links:
                link.deaf = True

        self._call(_mark)

    def unread_bytes(self) -> int:
        """Bytes the clients sent that have not reached the server: unread in this proxy's
        receive buffers, or read and held by a stall. In flight in the network, as a stalled
        link holds them."""

        async def count() -> int:
            total = 0
            for link in self._links:
                if link.client_reader is not None:  # read from the socket, not yet forwarded
                    total += len(link.client_reader._buffer)  # type: ignore[attr-defined]
                total += link.held
                sock = link.client.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        buf = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
                        total += struct.unpack("i", buf)[0]
            return total

        return asyncio.run_coroutine_threadsafe(count(), self._loop).result(10)

    def stall(self) -> None:
        """Nothing is read from either side until `restore()`: a peer that froze (a stopped
        VM, a full receive window). The senders' buffers fill and their writes wait. What a
        read in hand returns after this is held until `restore()` too (lost with a `cut()`)."""
        self._stalled = True

    def restore(self) -> None:
        self._cut = False
        self._half_open = False
        self._deaf = False
        self._stalled = False

    def _call(self, fn: object) -> None:
        async def run() -> None:
            fn()  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _close_all(self) -> None:
        for link in list(self._links):
            link.close()
        self._links.clear()

    # Forwarding ---------------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        if self.receive_buffer:
            for sock in self._server.sockets:  # accepted connections inherit it
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()  # the server is down: so is the link
            return
        link = _Link(writer, up_writer, dead=self._half_open, deaf=self._deaf, client_reader=reader)
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pump(reader, up_writer, link)),
            asyncio.create_task(self._pump(up_reader, writer, link, to_client=True)),
        ]

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: _Link, to_client: bool = False
    ) -> None:
        # Chunks wait in a queue until due, so latency delays each chunk without slowing the
        # stream's throughput (a long fat pipe, not a slow one).
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if link.dead or (to_client and link.deaf):
                    continue
                dst.write(data)
                await dst.drain()
                if self.bandwidth:
                    await asyncio.sleep(len(data) / self.bandwidth)

        sender = asyncio.create_task(deliver())
        try:
            while True:
                while self._stalled:
                    await asyncio.sleep(0.05)
                data = await src.read(_CHUNK)
                if not data:
                    break
                # Read after the stall began (the read was waiting when it was set): held too,
                # or the first publish after a stall would pass whole, its acks with it.
                if self._stalled:
                    if not to_client:
                        link.held = len(data)
                    while self._stalled:
                        await asyncio.sleep(0.05)
                    if not to_client:
                        link.held = 0
                if not link.dead:
                    queue.put_nowait((time.monotonic() + self.latency, data))
            queue.put_nowait((0.0, b""))
            await sender
        except (ConnectionError, asyncio.CancelledError, OSError):
            pass
        finally:
            sender.cancel()
            if not link.dead:
                link.close()
                self._links.discard(link)
