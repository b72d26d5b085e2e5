"""A flush that timed out, on a real server behind a slow link: its PONG arrives late, and the
connection must go on reading. nats-py leaves the timed-out flush's future in its list of
PINGs awaiting a PONG; the late PONG set a result on that cancelled future, the error ended the
read loop, and the connection heard nothing more until its pings ran out (minutes by default)."""

from __future__ import annotations

import asyncio

import pytest
from helpers import run
from nats import errors
from nats_servers import NatsCluster

from harness.faultproxy import FaultProxy
from replicator.nats.connect import open_connection


def test_a_late_pong_after_a_flush_timed_out_leaves_the_connection_reading(nats_server: NatsCluster) -> None:
    port = int(nats_server.url.split(",")[0].rsplit(":", 1)[1])
    with FaultProxy(port) as link:

        async def go() -> None:
            nc = await open_connection(link.url, name="test-late-pong")
            publisher = await open_connection(nats_server.url, name="test-late-pong-publisher")
            try:
                heard: asyncio.Queue[bytes] = asyncio.Queue()

                async def hear(msg: object) -> None:
                    await heard.put(msg.data)  # type: ignore[attr-defined]

                await nc.subscribe("late.pong", cb=hear)
                await nc.flush_in_order(5)
                link.latency = 0.8  # each way: the PONG comes back after the flush gave up
                with pytest.raises(errors.FlushTimeoutError):
                    await nc.flush(1)  # nats-py's own: its PING is written, its PONG not awaited
                await asyncio.sleep(2)  # the late PONG arrives
                link.latency = 0.0
                await publisher.publish("late.pong", b"after")
                await publisher.flush()
                assert await asyncio.wait_for(heard.get(), 10) == b"after"
                assert nc.is_connected
                await nc.flush_in_order(5)  # PINGs and PONGs still pair up
            finally:
                await publisher.close()
                await nc.close()

        run(go())
