"""The fault proxy itself, against a real nats-server: each fault does what the fault tests
rely on it to do."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats_servers import NatsCluster

from harness.faultproxy import FaultProxy

pytestmark = pytest.mark.integration


def _port(url: str) -> int:
    return int(url.split(",")[0].rsplit(":", 1)[1])


def test_latency_cut_half_open_and_restore(nats_server: NatsCluster) -> None:
    async def go(proxy: FaultProxy) -> None:
        events: list[str] = []

        async def on_disconnect() -> None:
            events.append("disconnected")

        async def on_reconnect() -> None:
            events.append("reconnected")

        nc = await nats.connect(
            proxy.url, disconnected_cb=on_disconnect, reconnected_cb=on_reconnect,
            reconnect_time_wait=0.2, max_reconnect_attempts=-1, ping_interval=1, max_outstanding_pings=2,
        )  # fmt: skip
        try:
            assert (await nc.rtt()) < 0.04
            proxy.latency = 0.025
            assert (await nc.rtt()) >= 0.05  # 25 ms each way
            proxy.latency = 0.0

            proxy.cut()
            await asyncio.sleep(1.0)
            assert events[:1] == ["disconnected"] and nc.is_reconnecting
            proxy.restore()
            # nats-py marks itself connected before it runs the reconnected callback: wait for both.
            for _ in range(150):
                if nc.is_connected and events[-1] == "reconnected":
                    break
                await asyncio.sleep(0.1)
            assert events[-1] == "reconnected"
            assert (await nc.request("$JS.API.INFO", b"", timeout=2)).data

            proxy.half_open()
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request("$JS.API.INFO", b"", timeout=1)
            assert nc.is_connected  # nothing told the client
            proxy.restore()
            # Its pings go unanswered: the client gives the connection up and reconnects.
            for _ in range(100):
                if events.count("reconnected") == 2 and nc.is_connected:
                    break
                await asyncio.sleep(0.1)
            assert events.count("reconnected") == 2
            assert (await nc.request("$JS.API.INFO", b"", timeout=2)).data
        finally:
            await nc.close()

    with FaultProxy(_port(nats_server.url)) as proxy:
        asyncio.run(go(proxy))


def test_drop_replies_stores_a_publish_and_loses_its_ack(nats_server: NatsCluster) -> None:
    async def go(proxy: FaultProxy) -> None:
        direct = await nats.connect(nats_server.url)
        nc = await nats.connect(proxy.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        try:
            await direct.jetstream().add_stream(name="DEAF", subjects=["deaf.>"])
            js = nc.jetstream(timeout=1)
            await js.publish("deaf.a", b"heard")
            proxy.drop_replies()
            with pytest.raises(nats.errors.TimeoutError):
                await js.publish("deaf.a", b"unheard")
            # The server stored what the client sent: only its ack was lost.
            info = await direct.jetstream().stream_info("DEAF")
            assert info.state.messages == 2
            proxy.restore()
            with pytest.raises(nats.errors.TimeoutError):  # that connection stays deaf
                await js.publish("deaf.a", b"still unheard")
            assert (await direct.jetstream().stream_info("DEAF")).state.messages == 3
        finally:
            await nc.close()
            await direct.close()

    with FaultProxy(_port(nats_server.url)) as proxy:
        asyncio.run(go(proxy))


def test_a_stall_holds_the_first_publish_after_it_until_restore(nats_server: NatsCluster) -> None:
    """The proxy's read is already waiting when a stall begins: what it returns is held too,
    or a kill during a stall could fall after a publish that passed whole (its ack with it)."""

    async def go(proxy: FaultProxy) -> None:
        direct = await nats.connect(nats_server.url)
        nc = await nats.connect(proxy.url)
        try:
            await direct.jetstream().add_stream(name="STALL", subjects=["stall.>"])
            js = nc.jetstream(timeout=10)
            await js.publish("stall.a", b"before")
            proxy.stall()
            after = asyncio.ensure_future(js.publish("stall.a", b"after" * 100))
            await asyncio.sleep(0.5)
            assert (await direct.jetstream().stream_info("STALL")).state.messages == 1, "it passed the stall"
            assert await asyncio.to_thread(proxy.unread_bytes) >= 500, "held, and counted as in flight"
            proxy.restore()
            await after
            assert (await direct.jetstream().stream_info("STALL")).state.messages == 2
        finally:
            await nc.close()
            await direct.close()

    with FaultProxy(_port(nats_server.url)) as proxy:
        asyncio.run(go(proxy))
