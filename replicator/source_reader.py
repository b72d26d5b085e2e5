"""Reading the source stream: the one reader every path uses.

Four paths read a range of the source: the next start's catch-up and gap fill, Spark's read
tasks, the driver's own reads of small batches, and the sampled stream's copies read back for
publishing. Each reads through a `SourceReader`, so each applies the same subject filter, the
same chunk bounds (`chunk_messages`, `chunk_bytes`: `target_initiated` reads four times as far
ahead) and the same choice between direct gets and a consumer, asked of the stream once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence

from replicator.copy_reads import chunked
from replicator.nats.client import ReplicatorClient
from replicator.nats.connect import open_connection
from replicator.nats.readers import DirectReader, RawMessage, read_chunks, stream_info
from replicator.options import ReaderOptions


class SourceStreamGone(RuntimeError):
    """The source stream does not exist (deleted while copying, or the wrong server)."""


class SourceReader:
    """Reads `[start, end)` of the source stream in `options`, in order, in chunks. On `nc` if
    given (a connection someone else owns), else on a connection of its own, opened on first
    use and closed by `close()`. Whether the stream allows direct gets is asked of it once
    (`direct` may say so already: the planner knows)."""

    def __init__(
        self, options: ReaderOptions, nc: ReplicatorClient | None = None, direct: bool | None = None
    ) -> None:
        self.o = options
        self._nc = nc
        self._owns_connection = nc is None
        self.direct = direct

    @property
    def connected(self) -> bool:
        """Whether its connection is up now (a reconnect in progress: no)."""
        return self._nc is not None and self._nc.is_connected

    def uses(self, nc: ReplicatorClient) -> bool:
        return self._nc is nc

    async def connection(self) -> ReplicatorClient:
        if self._nc is None or (self._owns_connection and self._nc.is_closed):
            self._nc = await open_connection(self.o.url, self.o.tls, name=f"sr-reader-{self.o.stream}")
        return self._nc

    async def allows_direct(self) -> bool:
        if self.direct is None:
            info = await stream_info(await self.connection(), self.o.stream)
            if info is None:
                raise SourceStreamGone(
                    f"source stream {self.o.stream} does not exist: its messages cannot be read"
                )
            self.direct = bool(info.config.allow_direct)
        return self.direct

    async def chunks(self, start: int, end: int) -> AsyncGenerator[list[RawMessage], None]:
        """Messages with start <= seq < end (matching the filter subject), in order."""
        nc = await self.connection()
        direct = await self.allows_direct()
        o = self.o
        chunks = read_chunks(
            nc, o.stream, start, end, direct=direct, filter_subject=o.filter_subject,
            chunk_messages=o.chunk_messages, chunk_bytes=o.chunk_bytes, prove_gone=True,
        )  # fmt: skip
        async with contextlib.aclosing(chunks):  # also when the caller stops early: a consumer is deleted
            async for chunk in chunks:
                yield chunk

    async def each(self, seqs: Sequence[int], sizes: Sequence[int]) -> AsyncGenerator[list[RawMessage], None]:
        """Messages `seqs` (ascending; `sizes` their payloads'), each read by a direct get of its
        own, a chunk's worth asked at once (the stream must allow direct gets). A sequence the
        stream no longer holds is left out."""
        reader = DirectReader(await self.connection(), self.o.stream, self.o.filter_subject, prove_gone=True)
        for chunk in chunked(seqs, sizes, self.o.chunk_messages, self.o.chunk_bytes):
            yield await reader.each(chunk)

    async def parts_side_by_side(self, parts: Sequence[tuple[int, int]]) -> list[list[RawMessage]]:
        """The chunks of consecutive sub-ranges, read at the same time and returned in order:
        across a long link each chunk waits a round trip, and this overlaps them. One read
        failing cancels the others and raises its error."""

        async def part(start: int, end: int) -> list[list[RawMessage]]:
            return [chunk async for chunk in self.chunks(start, end)]

        try:
            async with asyncio.TaskGroup() as group:
                reads = [group.create_task(part(start, end)) for start, end in parts]
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None  # what the caller knows (ReadInterrupted...)
        return [chunk for read in reads for chunk in read.result()]

    async def close(self) -> None:
        if self._owns_connection and self._nc is not None and not self._nc.is_closed:
            await self._nc.close()
        if self._owns_connection:
            self._nc = None
