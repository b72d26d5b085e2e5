"""What a connection lost mid-publish sends after it reconnects: nothing it had not sent before
(issue 28, hole 5). nats-py keeps what it had not yet written in its pending buffer and writes
it on the new connection, after whatever the old socket lost: later copies then land before
earlier ones that a retry publishes again, out of order wherever copies are not chained
(`chain_copies: false`, a target with another writer, `order: subject` lanes)."""

from __future__ import annotations

import asyncio
import time

from helpers import create_stream, publish_once_led, run
from nats_servers import NatsCluster

from harness.faultproxy import FaultProxy
from harness.streams import read_all
from replicator.nats.connect import open_connection


def test_publishes_not_sent_when_the_connection_dropped_are_not_sent_after_it(
    target_of_each_kind: tuple[NatsCluster, int],
) -> None:
    target, replicas = target_of_each_kind
    url = target.url
    run(create_stream(url, "P", ["p.>"], num_replicas=replicas))
    port = int(url.split(",")[0].rsplit(":", 1)[1])  # the link to the first server
    with FaultProxy(port) as link:

        async def publish_then_lose_the_link() -> None:
            nc = await open_connection(link.url, name="test-reconnect")
            try:
                # Acknowledged as stored: a core publish and a flush did not show that the stream
                # had stored it, and with -n 2 the test found nothing stored in 3 runs of 10
                await publish_once_led(nc.jetstream(), "p.x", b"0".rjust(1000))
                link.stall()  # the peer stops reading: the socket's buffers fill, then the client's
                for i in range(1, 20_000):
                    await nc.publish_encoded("p.x", "", b"", str(i).encode().rjust(1000))
                    if i % 1000 == 0:
                        await asyncio.sleep(0.05)  # the flusher hands what it can to the socket
                assert nc.pending_data_size > 0, "nothing left in the client's pending buffer"
                link.cut()
                await asyncio.sleep(0.3)
                link.restore()
                deadline = time.monotonic() + 20
                while nc.stats["reconnects"] == 0 and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                assert nc.stats["reconnects"] == 1
                await nc.flush(5)
            finally:
                await nc.close()

        run(publish_then_lose_the_link())
    stored = [int(m.data) for m in run(read_all(url, "P"))]
    assert stored, "nothing reached the server before the cut"
    assert stored == list(range(len(stored))), (
        f"{len(stored)} stored, not a prefix of what was published: first gap after "
        f"{next(i for i, v in enumerate(stored) if v != i) - 1}"
    )
