"""Reading whole streams back, for checks (tests, scenarios, benches, load tests)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TypeVar

from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.connect import open_connection
from replicator.nats.jetstream import stream_info
from replicator.nats.readers import RawMessage, read_chunks
from replicator.nats.tls import TLSFiles
from replicator.nats.wire import first_value

T = TypeVar("T")


async def stream_state(url: str, stream: str) -> tuple[int, int]:
    """(messages, last sequence) of `stream` now ((0, 0) if it does not exist), on a connection
    of its own."""
    nc = await open_connection(url, name="harness-count")
    try:
        info = await stream_info(nc, stream)
        return (0, 0) if info is None else (int(info.state.messages), int(info.state.last_seq))
    finally:
        await nc.close()


async def count_messages(url: str, stream: str) -> int:
    """Messages in `stream` now (0 if it does not exist), on a connection of its own."""
    return (await stream_state(url, stream))[0]


async def stored_span(url: str, stream: str) -> tuple[float, float] | None:
    """When the server stored `stream`'s first and last messages (epoch seconds), None if it
    has none."""
    nc = await open_connection(url, name="harness-span")
    try:
        info = await stream_info(nc, stream)
        if info is None or not info.state.messages:
            return None
        js = nc.jetstream()
        first = await js.get_msg(stream, seq=int(info.state.first_seq))
        last = await js.get_msg(stream, seq=int(info.state.last_seq))
        if first.time is None or last.time is None:
            return None
        return first.time.timestamp(), last.time.timestamp()
    finally:
        await nc.close()


async def read_all(url: str, stream: str, tls: TLSFiles | None = None) -> list[RawMessage]:
    """Every message of `stream` in sequence order (it holds them all in memory)."""
    return await read_digested(url, stream, lambda chunk: chunk, tls=tls)


async def read_digested(
    url: str,
    stream: str,
    digest: Callable[[list[RawMessage]], list[T]],
    filter_subject: str = "",
    tls: TLSFiles | None = None,
    tail: int = 0,
) -> list[T]:
    """What `digest` keeps of each chunk of `stream`'s messages (those matching
    `filter_subject`; with `tail`, of its last `tail` sequences only), in sequence order: a
    check of a stream larger than memory keeps only what it compares (a sender and a size, a
    header)."""
    nc = await open_connection(url, tls, name="harness-read", pending_size=256 * 1024 * 1024)
    try:
        info = await stream_info(nc, stream)
        if info is None or info.state.messages == 0:
            return []
        first = int(info.state.first_seq)
        if tail:
            first = max(first, int(info.state.last_seq) - tail + 1)
        out: list[T] = []
        async for chunk in read_chunks(
            nc,
            stream,
            first,
            info.state.last_seq + 1,
            direct=bool(info.config.allow_direct),
            filter_subject=filter_subject,
        ):
            out += digest(chunk)
        return out
    finally:
        await nc.close()


async def copied_sequences(url: str, stream: str) -> list[int]:
    """The source sequence in the Choria-SR-Source header of every message of `stream`, in
    its order (-1 where a message has none): what a copy must equal, 1..n."""
    marks = [parse_source_header(first_value(m.headers, SOURCE_HEADER)) for m in await read_all(url, stream)]
    return [m.sequence if m else -1 for m in marks]


async def copy_differences(
    src_url: str,
    stream: str,
    dst_url: str,
    target_stream: str,
    src_tls: TLSFiles | None = None,
    dst_tls: TLSFiles | None = None,
) -> list[str]:
    """How the target's copies differ from the source stream, sequence by sequence (subject
    aside, which a copy may rewrite): missing, duplicated, out of order or changed. Empty when
    the target holds exactly one copy of every source message, in order."""
    source = await read_all(src_url, stream, src_tls)
    copies = await read_all(dst_url, target_stream, dst_tls)
    seqs = [
        mark.sequence if (mark := parse_source_header(first_value(m.headers, SOURCE_HEADER))) else -1
        for m in copies
    ]
    problems = []
    want = [m.seq for m in source]
    if seqs != want:
        missing = sorted(set(want) - set(seqs))
        dup = len(seqs) - len(set(seqs))
        disorder = sum(1 for a, b in itertools.pairwise(seqs) if b <= a)
        problems.append(
            f"{len(seqs)} copies of {len(want)} messages: {len(missing)} missing (first {missing[:5]}), "
            f"{dup} duplicated, {disorder} out of order"
        )
    by_seq = {m.seq: m.data for m in source}
    changed = [s for s, m in zip(seqs, copies, strict=True) if s in by_seq and by_seq[s] != m.data]
    if changed:
        problems.append(f"{len(changed)} copies differ from their source message (first {changed[:5]})")
    return problems
