"""How copies are best handed to a target stream, side by side in one run: today's pipelined,
chained publishes (`PipelinedPublisher`, as the sink sends them), NATS 2.12's atomic batches
(`allow_atomic`, all or nothing per chunk of up to 1,000) and NATS 2.14's fast-ingest batches
(`allow_batched`, stored as they come, acks driven by the server), on one server (R1) and on a
3-server cluster (R3). Each mode copies the same messages, with the copies' own headers, in
sink-sized batches that each wait for their last ack, into a fresh target; the rate and the CPU
per message of the servers and of this (the publishing) process are printed for each. Mode
`nats-py` is nats-py's own `publish_async` (a future and a parsed ack per copy, unchained), what
the emulator used before it took the pipelined publisher: the baseline for the publisher's CPU.

    .venv/bin/python -m bench.publish_modes [--messages N] [--rounds R] [--topologies r1,r3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from bench.proctree import CpuSplit
from harness.localnats import local_cluster
from replicator.nats.client import ReplicatorClient
from replicator.nats.connect import open_connection
from replicator.nats.publisher import PipelinedPublisher

STREAM = "T"
BATCH = 10_000  # the sink's batch: each waits for its last ack before the next is published
ATOMIC_CHUNK = 1_000  # the servers' ceiling on an atomic batch (jetstream limits batch max_msgs)


def copies(n: int, size: int) -> Iterator[tuple[str, bytes, bytes]]:
    """(subject, data, header lines) of n copies as the sink makes them, without the chain."""
    data = b"x" * size
    for seq in range(1, n + 1):
        lines = (
            f"Choria-SR-Source: SRC {seq} bench bench {1_700_000_000_000 + seq}\r\nNats-Msg-Id: SRC:{seq}\r\n"
        ).encode()
        yield f"copy.reg.{seq % 10_000}", data, lines


async def chained(
    nc: ReplicatorClient, batch: list[tuple[str, bytes, bytes]], tail: int, r3: bool, fast_batch: bool = False
) -> int:
    """The sink's way: chained by message id and one ack per 256 copies on one server, chained
    by sequence and one ack per copy on a cluster (replicator.spark.sink); with `fast_batch` the
    same copies as one fast-ingest batch (the publisher's, acks as the server sends them)."""
    publisher = _publishers.setdefault(id(nc), PipelinedPublisher(nc, STREAM))

    def with_chain() -> Iterator[tuple[str, bytes, bytes]]:
        prev = f"SRC:{tail}"
        for i, (subject, data, lines) in enumerate(batch):
            if r3:
                lines += b"Nats-Expected-Last-Sequence: %d\r\n" % (tail + i)
            elif tail:
                lines += b"Nats-Expected-Last-Msg-Id: %s\r\n" % prev.encode()
            prev = lines.split(b"Nats-Msg-Id: ", 1)[1].split(b"\r\n", 1)[0].decode()
            yield subject, data, lines

    outcome = await publisher.publish(with_chain(), 60, 1 if r3 else 256, fast_batch=fast_batch)
    if outcome.failures or outcome.stored != len(batch):
        raise RuntimeError(f"{'fast batch' if fast_batch else 'chained'}: {outcome}")
    return tail + len(batch)


_publishers: dict[int, PipelinedPublisher] = {}


async def today(nc: ReplicatorClient, batch: list[tuple[str, bytes, bytes]], tail: int, r3: bool) -> int:
    return await chained(nc, batch, tail, r3)


async def fast(nc: ReplicatorClient, batch: list[tuple[str, bytes, bytes]], tail: int, r3: bool) -> int:
    return await chained(nc, batch, tail, r3, fast_batch=True)


async def atomic(nc: ReplicatorClient, batch: list[tuple[str, bytes, bytes]], tail: int, r3: bool) -> int:
    """Chunks of ATOMIC_CHUNK as atomic batches, up to 4 in flight: only each chunk's commit asks
    for an ack; its first copy expects the target's last sequence (the chain between chunks)."""
    inbox = nc.new_inbox()
    done: asyncio.Queue[bytes] = asyncio.Queue()

    def on_ack(_subject: bytes, _reply: bytes, data: bytes, _headers: bytes | None) -> None:
        done.put_nowait(data)

    sub = await nc.raw_subscribe(f"{inbox}.*", on_ack)
    outstanding = 0
    for c, start in enumerate(range(0, len(batch), ATOMIC_CHUNK)):
        chunk = batch[start : start + ATOMIC_CHUNK]
        bid = uuid.uuid4().hex
        for k, (subject, data, lines) in enumerate(chunk, 1):
            lines += b"Nats-Batch-Id: %s\r\nNats-Batch-Sequence: %d\r\n" % (bid.encode(), k)
            if k == 1:
                lines += b"Nats-Expected-Last-Sequence: %d\r\n" % (tail + start)
            last = k == len(chunk)
            if last:
                lines += b"Nats-Batch-Commit: 1\r\n"
            await nc.publish_encoded(subject, f"{inbox}.{c}" if last else "", lines, data)
        outstanding += 1
        while outstanding >= 4:
            _check_ack(await asyncio.wait_for(done.get(), 60))
            outstanding -= 1
    while outstanding:
        _check_ack(await asyncio.wait_for(done.get(), 60))
        outstanding -= 1
    await nc.raw_unsubscribe(sub)
    return tail + len(batch)


def _check_ack(data: bytes) -> None:
    if b'"error"' in data or b'"stream"' not in data:
        raise RuntimeError(f"refused: {data[:300]!r}")


_natspy_contexts: dict[int, JetStreamContext] = {}


async def natspy(nc: NATS, batch: list[tuple[str, bytes, bytes]], tail: int, r3: bool) -> int:
    """nats-py's `publish_async`, every ack awaited and checked at the end of the batch."""
    js = _natspy_contexts.setdefault(id(nc), nc.jetstream(publish_async_max_pending=4_000))
    acks = []
    for subject, data, lines in batch:
        headers = dict(line.split(": ", 1) for line in lines.decode().split("\r\n") if line)
        acks.append(await js.publish_async(subject, data, headers=headers))
    for ack in await asyncio.gather(*acks):
        if ack.stream != STREAM:
            raise RuntimeError(f"nats-py: acked by {ack.stream}")
    return tail + len(batch)


MODES: dict[str, Callable[..., Any]] = {"today": today, "atomic": atomic, "fast": fast, "nats-py": natspy}


async def copy_all(url: str, mode: str, n: int, size: int, r3: bool) -> float:
    nc = await (
        nats.connect(url.split(",")) if mode == "nats-py" else open_connection(url, name="publish-modes")
    )
    js = nc.jetstream()
    await js.add_stream(
        StreamConfig(
            name=STREAM,
            subjects=["copy.reg.>"],
            num_replicas=3 if r3 else 1,
            allow_direct=True,
            allow_atomic=mode == "atomic",
            allow_batched=mode == "fast",
        )
    )
    messages = list(copies(n, size))
    tail = 0
    t0 = time.monotonic()
    for start in range(0, n, BATCH):
        tail = await MODES[mode](nc, messages[start : start + BATCH], tail, r3)
    took = time.monotonic() - t0
    info = await js.stream_info(STREAM)
    if info.state.messages != n or info.state.last_seq != n:
        raise RuntimeError(f"{mode}: the target holds {info.state.messages} of {n}")
    last = await js.get_msg(STREAM, n)
    if last.headers is None or last.headers.get("Nats-Msg-Id") != f"SRC:{n}":
        raise RuntimeError(f"{mode}: the target's last message is not the last copy")
    await nc.close()
    return took


def one_round(mode: str, servers: int, n: int, size: int) -> dict[str, float]:
    with local_cluster(servers, f"pm{mode}") as target:
        pids = [s.proc.pid for s in target.servers if s.proc]
        cpu = CpuSplit(os.getpid(), pids)
        cpu.start()
        took = asyncio.run(copy_all(target.url, mode, n, size, servers > 1))
        split = cpu.stop()
    return {
        "msgs_per_s": n / took,
        "servers_us": split.get("nats-servers", 0.0) / n * 1e6,
        "publisher_us": sum(v for k, v in split.items() if k != "nats-servers") / n * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3, help="modes alternated round by round")
    ap.add_argument("--topologies", default="r1,r3")
    ap.add_argument("--modes", default="today,atomic,fast", help="of today, atomic, fast, nats-py")
    ap.add_argument("--out", default="reports/publish-modes.json")
    args = ap.parse_args()
    report: dict[str, Any] = {"messages": args.messages, "size": args.size, "rounds": args.rounds}
    modes = args.modes.split(",")
    for topology in args.topologies.split(","):
        servers = 3 if topology == "r3" else 1
        runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for mode in modes:
                runs[mode].append(one_round(mode, servers, args.messages, args.size))
            print(
                f"{topology} round {r + 1}: "
                + ", ".join(f"{m} {runs[m][-1]['msgs_per_s']:,.0f}" for m in modes)
                + " msg/s",
                flush=True,
            )
        base = statistics.median(x["msgs_per_s"] for x in runs[modes[0]])
        print(f"\n{topology}: {args.messages:,} x {args.size} B, medians of {args.rounds} alternated rounds")
        print(f"  {'mode':8} {'msg/s':>9} {'x ' + modes[0]:>8} {'servers µs':>11} {'publisher µs':>13}")
        for m in modes:
            med = {k: statistics.median(x[k] for x in runs[m]) for k in runs[m][0]}
            med["ratio"] = med["msgs_per_s"] / base
            report[f"{topology}/{m}"] = {"median": med, "rounds": runs[m]}
            print(
                f"  {m:8} {med['msgs_per_s']:9,.0f} {med['ratio']:8.2f} {med['servers_us']:11.1f} "
                f"{med['publisher_us']:13.1f}"
            )
        print(flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
