"""What JetStream acks cost the server that stores the copies: 100,000 x 1 KB published to a
fresh nats-server's stream with and without a reply subject (an ack asked for or not), each
with and without a `Nats-Msg-Id`, and the server's CPU per message in each case. It is why
chained copies ask for an ack only every 256th (docs/design.md, "The copy sink").

    .venv/bin/python -m bench.ack_cost [--messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import nats
from nats.js.api import StreamConfig

from bench.proctree import CpuSplit
from harness.localnats import local_cluster


async def publish(url: str, n: int, ask_ack: bool, with_id: bool) -> None:
    """n messages into stream T, flushed every 2,000; waits until each is acknowledged or, when
    no ack is asked for, until the stream holds them all."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="T", subjects=["t.>"]))
    data = b"x" * 1024
    acked = asyncio.Event()
    count = [0]

    async def on_ack(_msg: object) -> None:
        count[0] += 1
        if count[0] == n:
            acked.set()

    if ask_ack:
        await nc.subscribe("_INBOX.acks.*", cb=on_ack)
    for i in range(n):
        headers = {"Nats-Msg-Id": f"id:{i}"} if with_id else None
        await nc.publish(f"t.{i % 1000}", data, reply=f"_INBOX.acks.{i}" if ask_ack else "", headers=headers)
        if i % 2000 == 0:
            await nc.flush()
    await nc.flush()
    if ask_ack:
        await asyncio.wait_for(acked.wait(), 120)
    else:
        while (await js.stream_info("T")).state.messages < n:
            await asyncio.sleep(0.05)
    await nc.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    n = ap.parse_args().messages
    print(f"{n:,} x 1 KB into one nats-server; its CPU per message stored:")
    for with_id in (True, False):
        for ask_ack in (True, False):
            with local_cluster(1, "acks") as c:
                server = c.servers[0].proc
                assert server is not None
                cpu = CpuSplit(os.getpid(), [server.pid])
                cpu.start()
                t0 = time.monotonic()
                asyncio.run(publish(c.url, n, ask_ack, with_id))
                took = time.monotonic() - t0
                seconds = cpu.stop().get("nats-servers", 0.0)
            print(
                f"  ack {'asked' if ask_ack else 'not asked'}, {'with' if with_id else 'without'} Nats-Msg-Id: "
                f"{seconds / n * 1e6:.1f} µs ({n / took:,.0f} msg/s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
