"""Copying ahead while Spark starts: the first copies need not wait for the JVM.

Spark's session takes seconds to start (most of a first copy's wait: docs/performance.md). Once
its entries are prepared, the runner copies what each copy-only entry's query would read first,
from the driver, through the entry's own sink: the same reads (replicator.source_reader), the
same ordered, chained publishes, recorded in flight like a batch (replicator.spark.inflight).
It stops when the session is up; the query then starts where its checkpoint says, and its
first batches drop what the target already holds (the sink's floor), or, on a first start,
begin after it. Nothing here runs beside a query: the copies ahead end before any starts.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from replicator.live_mark import MarkPacer
from replicator.spark.sink import SinkClosed

if TYPE_CHECKING:
    from replicator.replication import StreamReplication

log = logging.getLogger(__name__)

STILL_WAITING_S = 30  # a stop that has not ended by then is logged


def ahead_range(query_start: int, floor: int, source_last: int | None) -> tuple[int, int] | None:
    """[first, end) to copy ahead of a query that starts at `query_start`: never at or below
    the target's copies (`floor`), up to the source's last sequence now; None when empty or
    the source's end is not known."""
    if source_last is None:
        return None
    first = max(query_start, floor + 1, 1)
    return (first, source_last + 1) if first <= source_last else None


def read_ahead(r: StreamReplication, first: int, end: int) -> Iterator[list[Any]]:
    """The entry's messages first <= seq < end, a chunk at a time, read as its query would."""
    from replicator.spark.datasource import read_range_chunks

    return read_range_chunks(r.reader_options(), first, end, r.source_direct)


class HeadStart:
    """Copies ahead for `replications` on a thread of its own until stop() (chunk by chunk,
    taking the entries in turn), or until each has copied what its source held."""

    def __init__(
        self,
        replications: list[StreamReplication],
        stopping: Callable[[], bool],
        chunks: Callable[[StreamReplication, int, int], Iterator[list[Any]]] | None = None,
    ) -> None:
        self.replications = [r for r in replications if r.can_copy_ahead()]
        self._chunks = chunks or read_ahead
        self._stopping = stopping
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.replications:
            self._thread = threading.Thread(target=self._run, name="head-start", daemon=True)
            self._thread.start()

    def stop(self, abandon: Callable[[], bool] = lambda: False) -> bool:
        """Stop after the chunk being published is acknowledged, and wait for that: True once
        ended. A server that stops answering can hold a chunk's read or publish: False if
        `abandon()` (a stop of the run) meanwhile, the chunk then left to its in-flight record."""
        self._stop.set()
        waited = 0
        while self._thread is not None:
            self._thread.join(1.0)
            if not self._thread.is_alive():
                break
            if abandon():
                return False
            waited += 1
            if waited == STILL_WAITING_S:
                log.warning("the copies ahead of the queries have not ended after %d s (a server not answering?); "
                            "the queries start once they have", waited)  # fmt: skip
        self._thread = None
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the copies ahead ended on their own (or were stopped): False past `timeout`."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _done(self) -> bool:
        return self._stop.is_set() or self._stopping()

    def _run(self) -> None:
        readers: dict[StreamReplication, Iterator[list[Any]]] = {}
        copied: dict[StreamReplication, int] = {}
        marks = {r: self._pacer(r) for r in self.replications}
        began = time.monotonic()
        try:
            for r in self.replications:
                if self._done():
                    break
                rng = self._ahead(r)
                if rng is not None and not self._done():
                    r.log.info("copying source sequences %d-%d ahead of the query while Spark starts", rng[0], rng[1] - 1)  # fmt: skip
                    readers[r] = self._chunks(r, *rng)
                    copied[r] = 0
            while readers and not self._done():
                for r, chunks in list(readers.items()):
                    if self._done():
                        break
                    marks[r].note()  # the last chunk's acks that came while the others were read
                    if not self._copy_one(r, chunks, copied):
                        del readers[r]
                    marks[r].note()
        finally:
            for chunks in readers.values():
                with contextlib.suppress(Exception):
                    chunks.close()  # type: ignore[attr-defined]
            for r, n in copied.items():
                self._settle(r, n, time.monotonic() - began)
                marks[r].note(force=True)  # the floor holds only acknowledged copies, settled or not

    def _ahead(self, r: StreamReplication) -> tuple[int, int] | None:
        try:
            return r.ahead_of_query()
        except Exception as e:  # the query's start meets the same, and reports it its way
            r.log.info("not copying ahead of the query: %s", e)
            return None

    def _copy_one(
        self, r: StreamReplication, chunks: Iterator[list[Any]], copied: dict[StreamReplication, int]
    ) -> bool:
        """The entry's next chunk published (its acks awaited with the next one's); False when
        it has no more or failed."""
        try:
            chunk = next(chunks, None)
            if not chunk or self._done():  # a stop during the read: nothing of it is recorded yet
                return False
            r.copy_ahead(chunk)
            copied[r] += len(chunk)
            return True
        except SinkClosed:  # a stop closed the target connection: _settle says how far it got
            return False
        except Exception as e:  # the query's start meets the same, and reports it its way
            r.log.warning("copying ahead stopped: %s", e)
            return False

    @staticmethod
    def _pacer(r: StreamReplication) -> MarkPacer:
        """How far the target acknowledged the copies ahead, written as they go (the live
        mark): a start after a kill -9 may not find them in the target's tail, and Spark's
        checkpoint has not moved meanwhile."""

        def failed(e: Exception) -> None:
            r.log.warning("the mark of the copies ahead was not written (%s)", e)

        return MarkPacer(lambda: r.sink.floor if r.sink else 0, r.note_live_progress, failed)

    def _settle(self, r: StreamReplication, read: int, seconds: float) -> None:
        try:
            r.settle_ahead()
        except Exception as e:  # the in-flight record stays: the query's start publishes it again
            r.log.warning("copying ahead stopped: %s", e)
            return
        r.log.info("read %d messages ahead of the query in %.1f s; the target holds up to source sequence %d",
                   read, seconds, r.sink.floor if r.sink else 0)  # fmt: skip
