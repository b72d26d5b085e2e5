"""Reading whole streams back, for checks (tests, scenarios, benches, load tests)."""

from __future__ import annotations

from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.connect import open_connection
from replicator.nats.jetstream import stream_info
from replicator.nats.readers import RawMessage, read_chunks
from replicator.nats.wire import first_value


async def count_messages(url: str, stream: str) -> int:
    """Messages in `stream` now (0 if it does not exist), on a connection of its own."""
    nc = await open_connection(url, name="harness-count")
    try:
        info = await stream_info(nc, stream)
        return 0 if info is None else int(info.state.messages)
    finally:
        await nc.close()


async def read_all(url: str, stream: str) -> list[RawMessage]:
    """Every message of `stream` in sequence order (it holds them all in memory)."""
    nc = await open_connection(url, name="harness-read", pending_size=256 * 1024 * 1024)
    try:
        info = await stream_info(nc, stream)
        if info is None or info.state.messages == 0:
            return []
        return [
            m
            async for chunk in read_chunks(
                nc,
                stream,
                info.state.first_seq,
                info.state.last_seq + 1,
                direct=bool(info.config.allow_direct),
            )
            for m in chunk
        ]
    finally:
        await nc.close()


async def copied_sequences(url: str, stream: str) -> list[int]:
    """The source sequence in the Choria-SR-Source header of every message of `stream`, in
    its order (-1 where a message has none): what a copy must equal, 1..n."""
    marks = [parse_source_header(first_value(m.headers, SOURCE_HEADER)) for m in await read_all(url, stream)]
    return [m.sequence if m else -1 for m in marks]
