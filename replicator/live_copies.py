"""Copies made as the source stores each message, beside the entry's running query.

A copy-only entry's micro-batch costs Spark ~26 ms of fixed work on this kind of machine
(planning, its offset and commit logs, the call into Python), so a live copy waited 37-48 ms
at p50 (docs/performance.md). With `copy_live`, a thread of the driver copies each new message
once the stream counts it: a doorbell (replicator.nats.doorbell) wakes it, it reads what lies
above the target's last copy, and publishes it through the entry's sink as a batch is published
(recorded in flight, chained, the acks awaited before the next publish). The query still runs,
once a second (LIVE_TRIGGER): its batches record in Spark's checkpoint how far the source is
handled, read only what the target lacks, and publish what the live copies did not.

One caller publishes at a time (the sink's `publishing` lock), and what either publishes is
cut to above the target's last copy, so together they publish each message once, in order. A
failed publish stops both: the sink raises it to every caller until the query's retry has
published it again (catch_up), and the live copies stop and start with the query. They end only
with the query, or reported to the runner, which starts both again. How far they reached is
kept beside the checkpoint for the next start (replicator.live_mark).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import TYPE_CHECKING

from replicator.live_mark import MarkPacer
from replicator.nats.client import ReplicatorClient
from replicator.nats.connect import open_connection
from replicator.nats.doorbell import Doorbell, DoorbellRefused, bell_subjects
from replicator.nats.jetstream import created_us
from replicator.nats.readers import RawMessage, stream_info
from replicator.source_reader import SourceReader

if TYPE_CHECKING:
    from replicator.replication import StreamReplication

# The query's trigger while its entry copies live: its batches only record progress.
LIVE_TRIGGER = "1 second"
# The longest wait for a ring before asking the stream anyway: a bell that misses a message
# (a publish the server makes itself, say) delays its copy by this at most, as long as the
# query's next batch would.
IDLE_WAIT_S = 1.0
# How often a stream without a doorbell (its subjects cover our own requests, it is fed by
# mirroring or sourcing, the subscription was refused) is asked.
POLL_S = 0.05
# After a ring, the stream may count the message a moment later (a clustered stream's replicas
# agree first): asked again after 2, 4, 8... ms, for this long.
RING_SETTLE_S = 0.1
RING_RECHECK_S = 0.002
# A failed read of the source is tried again after this (the query meets the same failure).
READ_RETRY_S = 1.0
# How long a stop waits for the thread: it stops at its next step (a read or a connect in hand
# ends within its own bound); one left running cannot publish past the sink's lock and floor.
STOP_WAIT_S = 5.0
# The live copies, stopped by something else than a publish, start again after this, doubling.
RESTART_FIRST_S = 1.0
RESTART_MAX_S = 30.0
# At most this many new messages are read in the same trip to the connection's loop as the
# stream's last sequence (_look); more are read a chunk at a time by _copy.
FEW_MESSAGES = 256


def _stored_bytes(m: RawMessage) -> int:
    """A message's bytes as the server counts them against a read's max_bytes: its subject,
    headers and data (each header line roughly: name, ': ', value, CRLF)."""
    headers = sum(len(k) + len(v) + 4 for k, v in m.headers) if m.headers else 0
    return len(m.subject) + headers + len(m.data)


class _Stop(Exception):
    """The live copies end, for the reason given."""


class LiveCopier:
    """Copies `r`'s new messages on a thread of its own until stop(); a failure other than a
    publish's (the sink reports those) starts them again after a backoff."""

    def __init__(self, r: StreamReplication) -> None:
        self.r = r
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nc: ReplicatorClient | None = None
        self._bell: Doorbell | None = None
        self._subjects: list[str] = []
        self._bell_refused = False
        # Looked up as it writes: what `r` holds then (and a copier made only for its pauses
        # needs none).
        self._mark = MarkPacer(
            lambda: r.sink.floor if r.sink else 0, lambda: r.note_live_progress(), self._mark_failed
        )
        self.copied = 0  # messages published live (cut to above the target's copies)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"live-{self.r.label}", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> bool:
        """Stop after the publish in hand has started (its acks come on the sink's loop), and
        wait for that: False if it did not end within STOP_WAIT_S (a server not answering)."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(STOP_WAIT_S)
        if self._thread.is_alive():
            self.r.log.warning(
                "the live copies did not stop within %.0f s (a server not answering?)", STOP_WAIT_S
            )
            return False
        self._thread = None
        return True

    def _run(self) -> None:
        r = self.r
        r.log.info("copying new messages live, beside the query")
        backoff, failed_at = RESTART_FIRST_S, 0.0
        assert r.sink is not None
        try:
            while not self._stop.is_set():
                try:
                    self._copy_until_stopped()
                except _Stop as e:  # the query meets the same, and reports it its way
                    r.log.warning("the live copies stopped: %s; the query's batches copy on", e)
                    return
                except Exception as e:
                    if self._stop.is_set():
                        return
                    if r.sink.publish_failed() is not None:
                        # The sink reports it: the runner stops the query and these, publishes
                        # what failed again (catch_up) and starts both again.
                        r.log.debug("live copies: a publish failed (%s)", e)
                        self._stop.wait()
                        return
                    if time.monotonic() - failed_at > RESTART_MAX_S * 2:
                        backoff = RESTART_FIRST_S  # a fresh fault, not the same one again
                    failed_at = time.monotonic()
                    r.log.warning("the live copies stopped (%s); starting them again in %.0f s", e, backoff)
                    self._close_connection()
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, RESTART_MAX_S)
        finally:
            self._settle()
            r.log.info("copied %d messages live", self.copied)

    def _settle(self) -> None:
        """The last publish's acks (a few seconds at most), the mark, the connection."""
        r = self.r
        assert r.sink is not None
        with contextlib.suppress(Exception):  # its failure is the sink's to report
            r.sink.wait_published(5)
        self._note_progress(force=True)
        self._close_connection()

    def _close_connection(self) -> None:
        r = self.r
        nc, self._nc, self._bell = self._nc, None, None
        if nc is not None:
            try:
                r.loop.run(nc.close(), 5)  # its doorbell's subscriptions go with it
            except Exception as e:
                r.log.debug("live copies: closing their connection: %s", e)

    def _note_progress(self, force: bool = False) -> None:
        """Write the live mark (replicator.live_mark) when the target's acknowledged copies
        moved on, at most every MARK_EVERY_S unless `force`."""
        self._mark.note(force)

    def _mark_failed(self, e: Exception) -> None:
        self.r.log.warning("the live copies' mark was not written (%s); a start resumes after the "
                           "target's last copy and the checkpoint only", e)  # fmt: skip

    def _copy_until_stopped(self) -> None:
        r = self.r
        assert r.sink is not None
        start = r.live_start()
        if start is None:
            raise _Stop("where the query started is not in its checkpoint's offset log (an older version's)")
        cursor = start - 1  # never before the query's start (its checkpoint, a configured start)
        self._nc = r.loop.run(open_connection(r.s.source_url, r.s.source_tls, name=f"sr-live-{r.s.name}"), 60)
        reader = SourceReader(r.reader_options(), self._nc, r.source_direct)
        settle_by = 0.0  # after a ring: ask again until then
        pause = RING_RECHECK_S
        while not self._stop.is_set():
            self._note_progress()
            cursor = max(cursor, r.sink.floor)
            try:
                last, few, covered = r.loop.run(self._look(reader, cursor), 60)
            except _Stop:
                raise
            except Exception as e:
                if self._nc is None or self._nc.is_closed:
                    raise  # a new connection (see _run)
                r.log.debug("live copies: the source did not answer (%s)", e)
                self._stop.wait(READ_RETRY_S)
                continue
            if few is not None:
                if not self._acks_in():
                    break  # stopped: nothing of these is recorded yet
                if few:
                    self.copied += r.copy_ahead(few).copied
                cursor = covered
                settle_by = 0.0
                continue
            if last > cursor:
                end = min(last, cursor + (r.s.batch_max_messages or 10_000)) + 1
                if not self._copy(reader, cursor + 1, end):
                    self._stop.wait(READ_RETRY_S)
                    continue
                cursor = end - 1
                settle_by = 0.0
                continue
            now = time.monotonic()
            if now < settle_by:
                if self._pause(min(pause, settle_by - now)):
                    # A ring: a clustered stream may count it a moment later, asked again
                    # after 2, 4, 8... ms as after any ring.
                    settle_by, pause = time.monotonic() + RING_SETTLE_S, RING_RECHECK_S
                else:
                    pause *= 2
                continue
            if self._wait_for_news():
                settle_by, pause = time.monotonic() + RING_SETTLE_S, RING_RECHECK_S

    async def _look(self, reader: SourceReader, cursor: int) -> tuple[int, list[RawMessage] | None, int]:
        """One trip to the connection's loop: where the source ends and, when only a few messages
        lie above `cursor` (a trickle), those messages too, (last, messages, the sequence they
        cover up to); (last, None, cursor) when there are none or more (read by _copy). Each
        trip costs two thread switches, which on a busy machine are where a copy waits
        (docs/performance.md)."""
        last = await self._source_last_seq()
        # Never more in one publish than a batch may hold.
        if not cursor < last <= cursor + min(FEW_MESSAGES, self.r.s.batch_max_messages or FEW_MESSAGES):
            return last, None, cursor
        got: list[RawMessage] = []
        size = 0
        try:
            async with contextlib.aclosing(reader.chunks(cursor + 1, last + 1)) as chunks:
                async for chunk in chunks:
                    got.extend(chunk)
                    size += sum(_stored_bytes(m) for m in chunk)
                    if size >= reader.o.chunk_bytes and got:
                        return last, got, got[-1].seq  # all up to it read; the rest next time
        except Exception as e:  # _copy reads them again, and retries as a failed read does
            self.r.log.debug("live copies: reading %d-%d failed (%s)", cursor + 1, last, e)
            return last, None, cursor
        return last, got, last

    async def _source_last_seq(self) -> int:
        """The source's last sequence; _Stop when it is gone or another stream of its name."""
        r = self.r
        assert self._nc is not None
        info = await asyncio.wait_for(stream_info(self._nc, r.s.stream), 5)
        if info is None:
            raise _Stop(f"source stream {r.s.stream} does not exist")
        created = created_us(info)
        if r.source_created_us and created and created != r.source_created_us:
            raise _Stop(f"source stream {r.s.stream} was created again")  # the start refuses it
        self._subjects = bell_subjects(info, r.s.filter_subject)
        return int(info.state.last_seq)

    def _copy(self, reader: SourceReader, first: int, end: int) -> bool:
        """Publish first <= seq < end a chunk at a time, each read while the one before is
        published: True when done (or stopped), False when a read failed (a publish's failure
        raises)."""
        r = self.r
        chunks = reader.chunks(first, end)

        async def next_chunk() -> list[RawMessage] | None:
            return await anext(chunks, None)

        try:
            while not self._stop.is_set():
                try:
                    chunk = r.loop.run(next_chunk(), 60)
                except Exception as e:
                    r.log.debug("live copies: reading %d-%d failed (%s)", first, end - 1, e)
                    return False
                if chunk is None or not self._acks_in():
                    return True  # done, or stopped: nothing of this chunk is recorded yet
                self.copied += r.copy_ahead(chunk).copied
                self._note_progress()
            return True
        finally:
            try:
                r.loop.run(chunks.aclose(), 10)  # a consumer the read made is deleted
            except Exception as e:
                r.log.debug("live copies: closing a read: %s", e)

    def _acks_in(self) -> bool:
        """Wait for the last publish's acks (a failure raises) without holding the sink's lock,
        so that a stop is not kept waiting: False when stopped meanwhile."""
        assert self.r.sink is not None
        while not self._stop.is_set():
            try:
                self.r.sink.wait_published(0.1)
                return True
            except TimeoutError:
                continue
        return False

    def _pause(self, seconds: float) -> bool:
        """Wait before asking the stream again. A ring ends the wait (True): a message published
        meanwhile is looked for at once, not after the pause (up to 64 ms). So does one that came
        while the stream was being asked and was not acted on yet: the stream may have answered
        before it stored the message."""
        bell = self._bell
        if bell is not None and bell.listening:
            return bell.heed(seconds) and not self._stop.is_set()
        self._stop.wait(seconds)
        return False

    def _wait_for_news(self) -> bool:
        """Nothing new: wait for a ring (or IDLE_WAIT_S, or POLL_S without a bell). True when
        it rang, or the bell was armed just now (a message stored before rang nothing)."""
        r = self.r
        nc = self._nc
        if self._bell_refused or not self._subjects or nc is None:
            self._stop.wait(POLL_S)
            return False
        bell = self._bell
        try:
            if bell is None or bell.subjects != self._subjects or bell.disconnects_at_arm != nc.disconnects:
                if bell is not None:
                    r.loop.run(bell.disarm(), 5)
                bell = self._bell = Doorbell(self._subjects)
            if not bell.armed and r.loop.run(bell.arm(nc), 10):  # armed: no trip to the loop
                return True
        except DoorbellRefused as e:
            r.log.info("live copies: the server refused a subscription to %s (%s); asking the stream every "
                       "%.0f ms instead", ", ".join(self._subjects), e, POLL_S * 1000)  # fmt: skip
            self._bell, self._bell_refused = None, True
            raise  # a limit's refusal closes the connection: a new one, without a bell
        except Exception as e:  # the connection is failing: the next ask says so
            r.log.debug("live copies: doorbell not armed (%s)", e)
            self._stop.wait(POLL_S)
            return False
        return bell.heed(IDLE_WAIT_S) and not self._stop.is_set()
