"""One configured stream: prepare the servers, then run its Spark query (source -> ordered sink)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import enum
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from replicator.aio import LoopThread, unless_stopped
from replicator.config import Config, StreamConfig
from replicator.election import Election, election_key
from replicator.entry_files import (
    checkpoint_location,
    clock_due_path,
    crash_leftovers,
    entry_dir,
    inflight_path,
    lease_path,
    live_mark_path,
    stopping_path,
    unacked_path,
)
from replicator.gap_fill import GapFill
from replicator.head_start import ahead_range
from replicator.headers import CopyOwner
from replicator.live_copies import LIVE_TRIGGER, LiveCopier
from replicator.live_mark import LiveMark, read_live_mark, write_live_mark
from replicator.logs import stream_logger
from replicator.metrics import metrics
from replicator.nats.connect import ConnectError, open_connection
from replicator.nats.doorbell import bell_subjects
from replicator.nats.jetstream import (
    answered,
    as_start_time,
    created_us,
    ensure_target_stream,
    find_last_copied,
    go_source_initiated_consumer,
    holds_copy,
    last_sequence,
    leader_change_warning,
    server_version,
    stream_info,
    wait_for_stream,
)
from replicator.nats.urls import parse_nats_url
from replicator.options import ReaderOptions, SamplingOptions
from replicator.progress import source_lag
from replicator.sampling.choria_state import (
    ChoriaStateError,
    choria_state_file,
    read_choria_state,
    seed_tables,
)
from replicator.sampling.rules import Event, SamplingParams
from replicator.source_reader import SourceReader
from replicator.spark.checkpoint import (
    INITIAL_OFFSET_FILE,
    CheckpointFiles,
    committed_end,
    has_commit,
    is_uri,
    keep_sampling_buckets,
    keep_source_identity,
    open_checkpoint,
)
from replicator.spark.datasource import (
    SourceRecreatedError,
    choose_initial_offset,
    parse_initial_offset,
    read_range_chunks,
    recreated_refusal,
)
from replicator.spark.inflight import InflightRange, InflightRecord
from replicator.spark.lanes import LaneSink
from replicator.spark.read_lease import write_lease
from replicator.spark.rows import to_record_batch
from replicator.spark.sampling import SamplingSink, decided_per_bucket
from replicator.spark.session import session_conf
from replicator.spark.session_args import copies_live, driver_read_limit, reads_through_spark
from replicator.spark.sink import BatchResult, OrderedSink, SinkSettings
from replicator.spark.small_batches import SmallBatchReader
from replicator.spark.unacked import UnackedRecord

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from replicator.nats.client import ReplicatorClient


# An election whose connection was refused for good (say, credentials revoked) asks again this often.
ELECTION_RECONNECT_S = 30.0


class QueryState(enum.Enum):
    NONE = "not started"
    RUNNING = "running"
    FAILED = "ended by a failed batch, or stopped"
    # A batch Spark already committed could not be published (its in-flight record holds it).
    PUBLISH_FAILED = "publishing a committed batch failed"


class StreamReplication:
    def __init__(self, cfg: Config, scfg: StreamConfig, loop: LoopThread) -> None:
        self.cfg = cfg
        self.s = scfg
        self.loop = loop
        self.sink: OrderedSink | None = None
        self.sampling_sink: SamplingSink | None = None
        # Set when the query's first batch reaches the sink (its planning is over by then).
        self.batch_started = threading.Event()
        # Called then, before the sink reads the batch (replicator.runner: the planners go first).
        self.on_first_batch: Callable[[], None] | None = None
        self.query: StreamingQuery | None = None
        self._source_nc: Any = None
        self._source_direct = False  # whether the source stream allows direct gets
        # Whether a doorbell can ring for the source's new messages (replicator.nats.doorbell).
        self._source_rings = False
        self._said_why_not_live = False  # the query copies: said once, not at each of its starts
        # The mark is written from the copies ahead's, the live copies' and the stopping thread:
        # one at a time, each reading the floor as it writes, so a later write is never lower.
        self._mark_lock = threading.Lock()
        # The source stream's creation (µs) as prepare() found it: a stream deleted and created
        # again is another stream, whose sequences a checkpoint of the old one does not cover.
        self._source_created_us = 0
        self._target_info: Any = None  # the target stream's info as prepare() found it
        self._live_mark: tuple[LiveMark, bool] | None = None  # the last run's, and whether its copy is held
        self.small_batches: SmallBatchReader | None = None  # a copy's driver-side reads
        self.live: LiveCopier | None = None  # copies made beside the query (copy_live)
        # Choria's state file this query's first batch was seeded from (and the checkpoint's
        # files), until that batch commits.
        self._choria_seeded: tuple[Path, Any] | None = None
        self._start_time: datetime | None = None
        self._end_at_start = 0  # start_at_end: the sequence after the source's last at start
        self.lag: int | None = None  # last value of update_lag(), for progress reports
        self.election: Election | None = None
        self.took_over = False  # leader-elected: this instance's query runs as the leader
        self._election_run: concurrent.futures.Future[None] | None = None
        self._won = 0  # the election's wins when this instance last took over
        # A batch failed and none has ended since: what it published may have left a copy
        # missing that only this instance's replay of it publishes (owes_copies).
        self.batch_unsettled = False
        self.log = stream_logger(__name__, self.label)
        # Finds and publishes what a batch that failed mid-way left missing (replicator.gap_fill).
        self.gap_fill = GapFill(loop, self.log)
        # The floor was just read from the target's last copy (a start, a takeover) and nothing
        # published since: catch_up need not read it again.
        self._floor_from_target = False

    @property
    def label(self) -> str:
        return f"{self.s.stream}/{self.s.name}"

    @property
    def query_name(self) -> str:
        return f"sr_{self.s.stream}_{self.s.name}"

    def prepare(self, stop: Callable[[], bool]) -> bool:
        """Wait for the source stream, make sure the target exists, find where we stopped.
        False if asked to stop while waiting (the source's connection then closed)."""
        if self.loop.run(self._prepare(stop)):
            return True
        if self._source_nc is not None:
            with contextlib.suppress(Exception):
                self.loop.run(self._source_nc.close(), 5)
            self._source_nc = None
        return False

    async def _prepare(self, stop: Callable[[], bool]) -> bool:
        s = self.s
        src_where = parse_nats_url(s.source_url).redacted()
        # Servers that do not answer are tried for ever: a stop (or a JVM that cannot start)
        # must end that wait too, not only the wait for the stream.
        self._source_nc = await unless_stopped(
            open_connection(s.source_url, s.source_tls, name=f"sr-source-{s.name}"), stop
        )
        if self._source_nc is None:
            return False
        info = await wait_for_stream(self._source_nc, s.stream, src_where, stop)
        if info is None:
            return False
        self._source_direct = bool(info.config.allow_direct)
        self._source_created_us = created_us(info)
        self._source_rings = bool(bell_subjects(info, s.filter_subject))
        replicas, filtered = info.config.num_replicas or 1, bool(s.filter_subject)
        if warning := leader_change_warning(server_version(self._source_nc), replicas, filtered):
            self.log.warning("%s", warning)
        if s.leader_election_name:
            go = await go_source_initiated_consumer(self._source_nc, s.stream, s.name)
            if go is not None:
                self.log.warning(
                    "the source stream has consumer %s, kept by the Go stream-replicator in its source-initiated "
                    "mode: a Go instance in this election that takes over copies again everything copied since "
                    "it last led; run it with target_initiated: true (or delete the consumer once it is gone)",
                    go,
                )
        found = await unless_stopped(
            answered(lambda: self._look_at_target(info), parse_nats_url(s.target_url).redacted(), stop), stop
        )
        if found is None or stop():  # stopped, even if the look got its answer meanwhile
            return False
        owner, floor = found
        if floor and floor > info.state.last_seq:
            self.log.warning(
                "the target holds copies up to source sequence %d but the source ends at %d: the "
                "source stream was recreated; copying it again from its start",
                floor,
                info.state.last_seq,
            )
            floor = 0
        if self._live_mark is not None:
            # The last run's live copies may have gone further than the tail shows (another
            # writer's messages since, the target's limits): never publish at or below them.
            mark, copy_held = self._live_mark
            if floor < mark.seq <= info.state.last_seq:
                why = mark.not_kept_because(created_us(info), s.target_stream, self._target_info)
                if why:
                    self.log.info(
                        "the last run's copies reached source sequence %d, but %s: resuming from the "
                        "checkpoint and the last copy found",
                        mark.seq,
                        why,
                    )
                elif copy_held:
                    self.log.info("the last run's live copies reached source sequence %d", mark.seq)
                    floor = mark.seq
                else:
                    self.log.info(
                        "the last run's copies reached source sequence %d, but the target no longer holds "
                        "our copy of source sequence %d at its sequence %d (restored from a backup, or "
                        "removed by its limits): resuming from the checkpoint and the last copy found",
                        mark.seq,
                        mark.copy_seq,
                        mark.target_seq,
                    )
        if floor and s.order == "subject":
            # Lanes publish side by side: the target's last copy says nothing of the other
            # lanes. The checkpoint says where to resume; Nats-Msg-Id drops what is there.
            self.log.info("order: subject resumes from its checkpoint, not from the target's last copy")
            floor = 0
        if floor:
            self.log.info("target already holds source sequences up to %d; resuming after it", floor)
        self._floor_from_target = True
        self._start_time = as_start_time(s.start_time, s.start_delta, datetime.now(UTC))
        # start_at_end means the end as the replicator starts, not when Spark first plans the
        # query (seconds later): messages published in between are copied.
        self._end_at_start = info.state.last_seq + 1
        self.sink = OrderedSink(
            SinkSettings(
                target_url=s.target_url,
                target_stream=s.target_stream,
                source_stream=s.stream,
                replicator=self.cfg.name,
                config_name=s.name,
                stream_identity=owner.elected_identity or self._copy_identity(info),
                elected=bool(s.leader_election_name),
                subject_prefix=s.target_subject_prefix,
                subject_remove=s.target_subject_remove,
                max_age_seconds=s.max_age.total_seconds() if s.max_age else None,
                tls=s.target_tls,
                chain=s.chain_copies,
            ),
            self.loop,
            floor=floor,
            # Copying overlaps publishing with Spark's next batch; sampling publishes in the
            # batch itself (its decisions live in Spark's state, not in the source).
            inflight=None
            if s.sampling or s.order == "subject"
            else InflightRecord(inflight_path(self.cfg, s), created_us(info)),
        )
        metrics().start_series(
            self.sink.labels, s.sampling, tuple(Event) if s.sampling and s.advisory is not None else ()
        )
        if s.sampling:
            self.sampling_sink = SamplingSink(
                self.sink,
                self.loop,
                SourceReader(self.reader_options()),  # asks the stream: "gone" is one clear error
                self.sampling_params(),
                UnackedRecord(unacked_path(self.cfg, s), s.target_stream, created_us(info)),
            )
        return True

    async def _look_at_target(self, info: Any) -> tuple[CopyOwner, int]:
        """The target stream made sure of, and this entry's last copy in it (0: none)."""
        s = self.s
        target = await open_connection(s.target_url, s.target_tls, name=f"sr-target-setup-{s.name}")
        try:
            # Its info as of now is also what the live mark is checked against.
            self._target_info = await ensure_target_stream(
                target,
                info,
                s.target_stream,
                s.target_subject_prefix,
                s.target_subject_remove,
                create=not s.no_target_create,
            )
            owner = self.copy_owner(info)
            found = await find_last_copied(target, s.target_stream, owner) or 0
            self._live_mark = await self._looked_up_live_mark(target, owner, found, info.state.last_seq)
            return owner, found
        finally:
            await target.close()

    async def _looked_up_live_mark(
        self, target: ReplicatorClient, owner: CopyOwner, found: int, source_last: int
    ) -> tuple[LiveMark, bool] | None:
        """The last run's live mark (an entry that writes one) where it goes past our last copy
        `found` in the target's tail, and whether the target still holds the copy it names where
        it names it: a target restored from a backup taken before that copy does not, even once
        other writers took it past the mark's sequence."""
        s = self.s
        if s.order != "stream" or s.sampling or s.leader_election_name or self._target_info is None:
            return None
        mark = read_live_mark(live_mark_path(self.cfg, s))
        if mark is None or not found < mark.seq <= source_last:
            return None  # none, or nothing it would add: not looked for
        if not (mark.copy_seq and mark.target_seq):
            return mark, False  # an earlier version's names no copy to look for (the start says so)
        return mark, await holds_copy(target, self._target_info, mark.target_seq, owner, mark.copy_seq)

    def copy_owner(self, info: Any) -> CopyOwner:
        """Which copies in the target are this entry's (headers.CopyOwner), given the source
        stream's info: a leader-elected entry's are also its other instances', whatever their
        top-level names, by an identity in their Nats-Msg-Id made of the election key and the
        source stream's creation (in microseconds: another source cluster's stream of the same
        name and entry has another)."""
        s = self.s
        elected = ""
        if s.leader_election_name:
            elected = f"{election_key(s.name, s.stream)}.{created_us(info)}"
        return CopyOwner(s.stream, self.cfg.name, s.name, elected, elected or self._copy_identity(info))

    def _copy_identity(self, info: Any) -> str:
        """What each copy's Nats-Msg-Id is made of, with its source sequence (not elected)."""
        s = self.s
        created = int(info.created.timestamp()) if info.created else 0
        return f"{self.cfg.name}.{s.name}.{s.stream}.{created}"

    def _choria_seed(self, files: Any) -> dict[int, bytes] | None:
        """A sampled entry's first query (no committed batch) starts from the senders of
        Choria's replicator's state file for the entry, where one is: a fleet switched from it
        sees no sender advised `new` or copied again. Once in the checkpoint the file is renamed
        (*.imported), so it never seeds a later checkpoint (a copy started again from scratch)."""
        path = choria_state_file(self.cfg.state_store, self.s.stream, self.s.name)
        if not path.is_file():
            return None
        if has_commit(files):
            self._retire_choria_state(path)  # imported by an earlier start, which died before renaming it
            return None
        assert self.s.inspect_duration is not None
        age = time.time() - path.stat().st_mtime
        if age > self.s.inspect_duration.total_seconds():
            self.log.warning("Choria's sampler state %s is older than inspect_duration (%.0f s): every sender in "
                             "it would have expired, so it is not imported", path, age)  # fmt: skip
            return None
        try:
            senders = read_choria_state(path)
        except ChoriaStateError as e:
            raise RuntimeError(
                f"{e}: fix or remove the file (its senders would all be advised new)"
            ) from None
        self.log.info("starting from the %d senders of Choria's sampler state %s", len(senders), path)
        self._choria_seeded = (path, files)
        return seed_tables(senders, self.s.sampling_buckets)

    def batch_committed(self) -> None:
        """A batch of the entry's query ended (Spark's progress event): once the checkpoint
        holds a commit, the seed is in it."""
        self.batch_unsettled = False
        if self._choria_seeded is not None and has_commit(self._choria_seeded[1]):
            self._retire_choria_state(self._choria_seeded[0])
            self._choria_seeded = None

    def _retire_choria_state(self, path: Path) -> None:
        done = path.with_name(path.name + ".imported")
        with contextlib.suppress(FileNotFoundError):
            path.replace(done)
            self.log.info(
                "Choria's sampler state is in the checkpoint now: %s renamed to %s", path, done.name
            )

    def sampling_params(self) -> SamplingParams:
        """The sampling rules and where advisories go: built here only (the reader's part, who a
        sender is, is ReaderOptions.sampling)."""
        s = self.s
        assert s.inspect_duration is not None and s.warn_duration is not None
        sender = SamplingOptions.from_config(s).extractor()
        return SamplingParams(
            inspect_ms=int(s.inspect_duration.total_seconds() * 1000),
            warn_ms=int(s.warn_duration.total_seconds() * 1000),
            size_trigger=s.size_trigger,
            stream=s.stream,
            replicator=self.cfg.name,
            inspect_label=sender.label,
            advisory_subject=s.advisory.subject if s.advisory else "",
            advisory_reliable=bool(s.advisory and s.advisory.reliable),
            drop_late=s.late_expiry == "drop",
        )

    def reader_options(self) -> ReaderOptions:
        """What the query reads: the config's stream, from where the target's copy ends."""
        floor = self.sink.floor if self.sink else 0
        options = ReaderOptions.from_config(self.s, min_start_sequence=floor + 1 if floor else 0,
                                         start_time=self._start_time,
                                         stop_file=str(stopping_path(self.cfg, self.s)),
                                         lease_file=str(lease_path(self.cfg, self.s)) if self.hot_standby else "",
                                         clock_due_file=str(clock_due_path(self.cfg, self.s)),
                                         source_created_us=self._source_created_us)  # fmt: skip
        if options.start_at_end and self._end_at_start:
            options = dataclasses.replace(options, start_at_end=False, start_sequence=self._end_at_start)
        return options

    def catch_up(self) -> None:
        """Publish what an earlier run left in flight (see replicator.spark.inflight) before the
        query resumes after it."""
        assert self.sink is not None, "prepare() first"
        # Live copies that did not stop in time (stop_live) may be publishing: after them.
        if not self.sink.publishing.acquire(timeout=self.sink.settings.ack_timeout):
            raise RuntimeError(
                f"the batch in flight is still being published after {self.sink.settings.ack_timeout:.0f} s"
            )
        try:
            self._catch_up()
        finally:
            self.sink.publishing.release()

    def _catch_up(self) -> None:
        assert self.sink is not None
        # Publishing goes on after this: the next catch_up reads the target's last copy again.
        floor_from_target, self._floor_from_target = self._floor_from_target, False
        try:
            self.sink.wait_published(self.sink.settings.ack_timeout)  # a publish still running settles first
        except Exception as e:
            if isinstance(e, TimeoutError) and self.sink.still_publishing():
                # Still publishing: what it left in flight is not known yet (tried again later).
                raise RuntimeError(
                    f"the batch in flight is still being published after {self.sink.settings.ack_timeout:.0f} s"
                ) from None
            self.log.info("the batch in flight failed (%s); publishing it again", e)
        # Nothing else publishes now (no query, no live copies): what follows settles it, or
        # raises and leaves its record for the next try.
        self.sink.failure_settled()
        record = self.sink.inflight
        left = record.read() if record is not None else None
        if record is None or left is None:
            return
        if record.of_another_stream(left):
            # Its sequences are another stream's: published again from this one, they would be
            # wrong copies, and the query would start after them, past this stream's first ones.
            self.log.warning("dropping the record of source sequences %d-%d left in flight: they were read from an "
                             "earlier source stream of this name, deleted since", left.first_seq, left.last_seq)  # fmt: skip
            record.clear()
            return

        def read(first: int, end: int) -> Iterator[list[Any]]:
            return read_range_chunks(self.reader_options(), first, end)

        acked = self.sink.floor
        # Copies whose acks were lost (a server killed mid-batch, a link gone deaf) may be in
        # the target, and this runs long after they were sent: past the target's duplicate
        # window, Nats-Msg-Id would not drop them again. So from the target's last copy of
        # ours, as a start does (its floor came from there already, nothing sent since).
        found: int | None = 0  # None: not read in time
        if left.last_seq > acked and not floor_from_target:
            found = self._last_copy_in(left)
        known = found is not None
        if left.unchained:
            # An unchained range can lack copies below its last stored one: the gap fill finds
            # and publishes them.
            told = self.gap_fill.run(
                self.sink,
                left.first_seq,
                min(left.last_seq, max(acked, found or 0)),
                left.since_ns,
                read,
                settle_unknown=(found or 0) <= acked,
            )
            known = known and told
        if not known and left.unchained:
            # Not known which it holds above what acks said: all of that again, twice rather
            # than one never. Unchained: a chained publish reads the target's tail and goes on
            # after it, past a copy that a gap lacks. (A chained range has no gap: its
            # publish below reads the tail and goes on after our last copy when the tail is
            # ours; after another writer's message, it stores again what is above the acks.)
            first = max(left.first_seq, acked + 1)
            self.log.warning(
                "could not tell which copies of source sequences %d-%d the target holds: publishing them "
                "again, unchained (past its duplicate window, those it holds are stored twice)",
                first,
                left.last_seq,
            )
            for chunk in read(first, left.last_seq + 1):
                if chunk:
                    self.sink.fill_gaps(pa.Table.from_batches([to_record_batch(self.s.stream, chunk)]))
        else:
            self.sink.handled_up_to(found or 0)
            first = max(left.first_seq, self.sink.floor + 1)
            if first <= left.last_seq:
                self.log.info("publishing source sequences %d-%d, left in flight when it last stopped", first, left.last_seq)  # fmt: skip
                for chunk in read(first, left.last_seq + 1):
                    self.sink.republish(pa.Table.from_batches([to_record_batch(self.s.stream, chunk)]))
        self.sink.handled_up_to(left.last_seq)
        record.clear()

    def owes_copies(self) -> bool:
        """Whether copies this instance left in flight are not settled yet: only its catch_up
        (a copy entry's in-flight record) or its replay of a failed batch (a sampled entry's,
        recorded in unacked.json) publishes them and fills any gap they may have left. A peer
        taking over continues after the target's last copy, past such a gap (unless it shares
        this instance's state_store), so this instance keeps the lead until they are settled."""
        if self.batch_unsettled:
            return True
        record = self.sink.inflight if self.sink is not None else None
        try:
            return record is not None and record.read() is not None
        except RuntimeError:  # unreadable: not known to be settled
            return True

    def start(self, spark: SparkSession) -> StreamingQuery:
        """Start the entry's query (after catch_up, when leading); on failure it has none."""
        assert self.sink is not None, "prepare() first"
        self.stop_live()
        self.refuse_a_recreated_source()
        if self.query_active():
            # Never two queries for one entry (Spark refuses the second, and the first would go
            # on unseen): a hot standby's idle query still runs when a failed take-over is
            # retried after it lost the lead.
            self.log.info("stopping the entry's running query before starting it again")
            self.stop_query(grace=2.0)
        self.query = None
        self.batch_started.clear()
        if self.hot_standby and not self.took_over:
            lease_path(self.cfg, self.s).unlink(missing_ok=True)  # stand by until take_over()
        leads = self.leading()  # once: a first election may be won meanwhile
        if leads:
            self.catch_up()  # a standby leaves its in-flight copies to whoever leads
        ckpt = checkpoint_location(self.cfg, self.s)
        files = open_checkpoint(ckpt, spark)
        entry_dir(self.cfg, self.s).mkdir(parents=True, exist_ok=True)
        stopping_path(self.cfg, self.s).unlink(missing_ok=True)  # left by a stop that was cut short
        # Computed with the last run's durations, which the config may have changed since: the
        # first batch writes it anew (until then the clock moves every second).
        clock_due_path(self.cfg, self.s).unlink(missing_ok=True)
        for leftover in crash_leftovers(files):
            files.delete(leftover)
            self.log.info("removed %s, a log file half-written when the last run was killed", leftover)
        keep_source_identity(files, self.s.stream, self._source_created_us)
        if self.sampling_sink is not None:
            assumed = keep_sampling_buckets(files, self.s.sampling_buckets)
            if assumed:
                self.log.warning("%s", assumed)
            # A sampled batch commits only once its copies are acknowledged, so all up to the
            # committed end is handled (copied or skipped), though the target's last copy may be
            # older: from there, not from that copy, the lag counts (a restart or a takeover of a
            # shared checkpoint showed the skipped tail as lag until the next batch with data).
            # Not past the source's end: a stream recreated since reads from its start again.
            end = committed_end(files)
            last = self._source_last_seq() if end else None
            committed = end - 1 if end and last is not None and end - 1 <= last else 0
            if committed:
                self.sink.handled_up_to(committed)
                # Not the floor: a batch's copies move it before its advisories are out, and a
                # takeover moves it to the target's last copy, which the replay may advise about.
                self.sink.show_handled(committed)
            if leads:
                # What failed publishes sent, recorded by this process or an earlier run: the
                # replay of their batch publishes what the target lacks of it.
                self.sampling_sink.resume(committed)
        elif leads:
            # A copy's floor is the target's last copy, with what was in flight caught up.
            self.sink.show_handled(self.sink.floor)
        options = dataclasses.replace(self.reader_options(), initial_offset=self._initial_offset(files))
        df = spark.readStream.format("nats-jetstream").options(**options.to_spark()).load()
        sink: Any = self.sink
        if self.s.order == "subject":
            sink = LaneSink(self.sink.settings, self.s.lanes, self._lanes_done)
        elif self.sampling_sink is None:
            self.sink.reads_above_floor = self.can_copy_live(str(spark.sparkContext.master))
            # A batch small enough for one read task is read in the driver instead.
            self.small_batches = SmallBatchReader(
                options,
                files,
                self.loop,
                SourceReader(options, self._source_nc, self._source_direct),
                self.driver_read_limit(str(spark.sparkContext.master)),
            )
            self.sink.small_batches = self.small_batches
        partitions = None
        if self.sampling_sink is not None:
            partitions = str(self.s.sampling_partitions)
            df = decided_per_bucket(df, self.sampling_params(), self._choria_seed(files))
            sink = self.sampling_sink

        def sink_noting_start(batch_df: Any, batch_id: int) -> None:
            if not self.batch_started.is_set():
                self.batch_started.set()
                self._first_batch_reached()
            sink(batch_df, batch_id)

        # The query takes its own copy of the session's settings when it starts; a checkpoint
        # keeps the shuffle partitions of its first batch.
        writer = df.writeStream.foreachBatch(sink_noting_start)
        if self.sink.reads_above_floor:
            # Copied live, a new message does not wait for a batch: the batches only record
            # progress, and once a second costs the JVM a fraction of one after each message.
            writer = writer.trigger(processingTime=LIVE_TRIGGER)
        with session_conf(spark, "spark.sql.shuffle.partitions", partitions):
            self.query = writer.queryName(self.query_name).option("checkpointLocation", ckpt).start()
        self.log.info("replicating to %s (checkpoint %s)", self.s.target_stream, ckpt)
        if self.sink.reads_above_floor:
            self.live = LiveCopier(self)
            self.live.start()
        return self.query

    def query_state(self) -> tuple[QueryState, BaseException | None]:
        """How the entry's query is doing, and the error that ended it or its publishing."""
        q = self.query
        if q is None:
            return QueryState.NONE, None
        if not q.isActive:
            return QueryState.FAILED, q.exception()
        published = self.sink.publish_failed() if self.sink is not None else None
        if published is not None:
            return QueryState.PUBLISH_FAILED, published
        return QueryState.RUNNING, None

    def query_active(self) -> bool:
        """Whether the query runs (its publishing may have failed: see query_state)."""
        return self.query is not None and self.query.isActive

    def drop_query(self) -> None:
        """Stop the query now, if it runs, and forget it (it is started again from its checkpoint,
        after catch_up)."""
        self.stop_live()
        q, self.query = self.query, None
        if q is not None and q.isActive:
            q.stop()

    def driver_read_limit(self, master: str) -> int:
        """The largest copy batch (in messages) the driver reads itself (config driver_reads)."""
        return driver_read_limit(self.s, master)

    def reads_through_spark(self, master: str) -> bool:
        """Whether this entry's batches go through Spark's Python task workers."""
        return reads_through_spark(self.s, master)

    def _lanes_done(self, r: BatchResult) -> None:
        """Every lane of a batch is acknowledged: the target holds the batch whole."""
        assert self.sink is not None
        self.sink.handled_up_to(r.last_seq)
        self.sink.account(r)

    def can_copy_ahead(self) -> bool:
        """Whether the entry copies ahead of its query while Spark starts (replicator.head_start):
        a copy in source order with an in-flight record and its checkpoint under state_store, without an
        election (who leads is not known before the campaign)."""
        return (
            self.s.copy_ahead
            and self.sink is not None
            and self.sink.inflight is not None
            and self.sampling_sink is None
            and self.s.order != "subject"
            and not self.s.leader_election_name
            and not is_uri(checkpoint_location(self.cfg, self.s))
        )

    def can_copy_live(self, master: str) -> bool:
        """Whether the entry copies new messages beside its query (copy_live; replicator.live_copies):
        the entries that copy ahead at the start, while Spark runs embedded unless told. Unset,
        only where a new message costs a ring and a direct get: without allow_direct each read
        makes a consumer, and a stream no bell rings for would be asked every 50 ms."""
        if not (copies_live(self.s, master) and self.can_copy_ahead()):
            return False
        if self.s.copy_live is None and not (self._source_direct and self._source_rings):
            if not self._said_why_not_live:
                self._said_why_not_live = True
                self.log.info(
                    "the query's batches make the copies: live copies (copy_live) need a source stream "
                    "with allow_direct, not fed by mirror or sources; set copy_live: true to copy live anyway"
                )
            return False
        return True

    def note_live_progress(self) -> int:
        """Write how far the target acknowledged this entry's copies (replicator.live_mark), for
        a start that cannot see it in the target's tail: the sequence written (0: none)."""
        with self._mark_lock:
            return self._write_live_mark()

    def _write_live_mark(self) -> int:
        if self.sink is None or self._target_info is None:
            return 0
        floor = self.sink.floor
        # Read after the floor: the copy the sink knows of last is then one stored after every
        # copy the floor covers (it notes a copy before its floor moves past it).
        known = self.sink.known_copy
        if not floor or known is None:
            return 0  # nothing that a start could check the target against
        copy_seq, target_seq = known
        mark = LiveMark(
            seq=floor,
            source_created_us=self._source_created_us,
            target_stream=self.s.target_stream,
            target_created_us=created_us(self._target_info),
            target_seq=target_seq,
            copy_seq=copy_seq,
        )
        write_live_mark(live_mark_path(self.cfg, self.s), mark)
        return mark.seq

    def stop_live(self) -> None:
        """End the live copies, if they run (each start begins them again after the query's)."""
        live, self.live = self.live, None
        if live is not None:
            live.stop()

    def live_start(self) -> int | None:
        """The first sequence the live copies may copy: where the running query started (its
        checkpoint's committed end, else its first offset), never before it: a configured start
        (start_sequence, start_time, start_at_end) leaves out what lies before it. None: an
        offset log not in the data source's form, whose start only the query knows."""
        return self._query_start(open_checkpoint(checkpoint_location(self.cfg, self.s), None))

    def _query_start(self, files: CheckpointFiles) -> int | None:
        """Where the query starts or started: its checkpoint's committed end, else the first
        offset it keeps (chosen now if need be); None for an offset log not in the data
        source's form (the query decides)."""
        start = committed_end(files)
        if start is None:
            if has_commit(files):
                return None
            start = int(json.loads(self._initial_offset(files))["seq"])
        return start

    @property
    def source_created_us(self) -> int:
        """The source stream's creation as prepare() found it (0: not known)."""
        return self._source_created_us

    def ahead_of_query(self) -> tuple[int, int] | None:
        """What to copy before the query starts, [first, end): from where the query will start
        (its checkpoint's committed end, else the first offset it will keep, chosen now), above
        the target's copies, to the source's end now. None: nothing, or no such start known.
        What an earlier run left in flight is published first, as the query's start does."""
        assert self.sink is not None, "prepare() first"
        self.catch_up()
        files = open_checkpoint(checkpoint_location(self.cfg, self.s), None)
        keep_source_identity(files, self.s.stream, self._source_created_us)  # the query's start says why
        start = self._query_start(files)
        if start is None:
            return None
        return ahead_range(start, self.sink.floor, self._source_last_seq())

    def copy_ahead(self, chunk: list[Any]) -> BatchResult:
        """Publish a chunk read ahead of the query as a batch is (recorded in flight, its
        publishing overlapping the next chunk's read): what it publishes (`copied`) once cut
        to above the target's copies."""
        assert self.sink is not None
        return self.sink.publish_rows(
            pa.Table.from_batches([to_record_batch(self.s.stream, chunk)]), time.monotonic()
        )

    def settle_ahead(self) -> None:
        """The copies ahead are over: wait for the last chunk's acks, and let a first query start
        after them instead of reading them again (no batch has run from its first offset yet)."""
        assert self.sink is not None
        self.sink.wait_published(self.sink.settings.ack_timeout)
        files = open_checkpoint(checkpoint_location(self.cfg, self.s), None)
        if self.sink.floor and not any(name.isdigit() for name in files.names("offsets")):
            kept = json.loads(self._initial_offset(files))
            if self.sink.floor + 1 > kept["seq"]:
                files.write_text(INITIAL_OFFSET_FILE, json.dumps({**kept, "seq": self.sink.floor + 1}))

    @property
    def source_direct(self) -> bool:
        """Whether the source stream allows direct gets (known once prepared)."""
        return self._source_direct

    def _initial_offset(self, files: CheckpointFiles) -> str:
        """The query's first offset (JSON), chosen once and kept in its checkpoint: Spark asks
        for it again when the first batch is replayed (its commit lost to a crash or a full
        disk), and by then the configured start and the target's last copy may give another
        one: a sampled stream's state would then miss the messages it had read."""
        text = files.read_text(INITIAL_OFFSET_FILE)
        if text is not None:
            parse_initial_offset(text, f"{files.location}/{INITIAL_OFFSET_FILE}")
            return text
        offset = self.loop.run(choose_initial_offset(self._source_nc, self.reader_options()), 60)
        text = json.dumps(offset)
        files.write_text(INITIAL_OFFSET_FILE, text)
        return text

    def servers_answer(self, timeout: float = 2.0) -> bool:
        """Whether the source's and the target's JetStream answer now (each within `timeout`)."""
        if self._source_nc is None or self.sink is None:
            return False

        async def probe() -> bool:
            assert self.sink is not None
            source = await stream_info(self._source_nc, self.s.stream)
            return source is not None and await self.sink.target_answers()

        async def bounded() -> bool:  # probe() made on the loop: a refused call leaves none unawaited
            return await asyncio.wait_for(probe(), timeout)

        try:
            return bool(self.loop.run(bounded(), timeout + 1))
        except Exception:
            return False

    def refuse_a_recreated_source(self) -> None:
        """Raise unless the source stream is the one prepare() found: deleted (it may come back
        as another), or SourceRecreatedError once it was created again. A retry or a takeover
        does not prepare again, and what a batch left to do (in flight, or in Spark's offset
        log, which a query replays without asking the stream) would be read from the new stream
        under the old one's sequences. A source that does not answer now is left to the query's
        start."""

        async def created() -> int | None:
            info = await stream_info(self._source_nc, self.s.stream)
            return created_us(info) if info is not None else None

        if not self._source_created_us:
            return
        try:
            now = self.loop.run(created(), 10)
        except Exception:
            return
        where = parse_nats_url(self.s.source_url).redacted()
        if now is None:
            raise RuntimeError(
                f"source stream {self.s.stream} does not exist on {where} (deleted, or another server?): "
                "nothing is read until it does; one created again is refused until its checkpoint is removed"
            )
        if now and now != self._source_created_us:
            raise SourceRecreatedError(
                recreated_refusal(
                    self.s.stream, where, now, self._source_created_us, "this entry was prepared"
                )
            )

    def _source_last_seq(self) -> int | None:
        """The source stream's last sequence now, None when it cannot be asked."""

        async def last() -> int | None:
            info = await stream_info(self._source_nc, self.s.stream)
            return None if info is None else int(info.state.last_seq)

        try:
            return self.loop.run(last(), 5)
        except Exception:
            return None

    def _source_span(self) -> tuple[int, int] | None:
        """The source stream's first sequence and its last on the entry's filter_subject, now;
        None when they cannot be asked."""

        async def span() -> tuple[int, int] | None:
            info = await stream_info(self._source_nc, self.s.stream)
            if info is None:
                return None
            return int(info.state.first_seq), await last_sequence(
                self._source_nc, info, self.s.filter_subject
            )

        try:
            return self.loop.run(span(), 5)
        except Exception:
            return None

    def update_lag(self) -> int | None:
        """Source lag (progress.source_lag: what is left to handle of what the source still
        holds), also set as a metric."""
        if self._source_nc is None or self.sink is None:
            return None
        span = self._source_span()
        if span is None:
            return None
        lag = source_lag(*span, self.sink.floor)
        self.sink.labels.of(metrics().lag).set(lag)
        self.lag = lag
        return lag

    def start_election(self) -> None:
        """Campaign for the entry's leader_election_name (replicator.election); the sinks publish
        only while this instance leads. The election has a connection of its own: renewals do
        not queue behind a read's replies, and it outlives the query's (a sampled entry's
        query stops while it stands by, a clean stop resigns after the query has stopped)."""
        if not self.s.leader_election_name or self.sink is None:
            return
        s = self.s
        self.election = Election(
            None,
            election_key(s.name, s.stream),
            s.leader_election_name,
            self.label,
            replicator=self.cfg.name,
        )
        self.sink.may_publish = self.election.leading
        self._election_run = self.loop.submit(self._campaign(self.election))

    async def _campaign(self, election: Election) -> None:
        while True:
            try:
                nc = await open_connection(
                    self.s.source_url, self.s.source_tls, name=f"sr-election-{self.s.name}"
                )
                break
            except ConnectError as e:  # refused for good (credentials revoked since the start)
                self.log.error("leader election: %s; trying again in %.0f s", e, ELECTION_RECONNECT_S)
                await asyncio.sleep(ELECTION_RECONNECT_S)
        election.nc = nc
        try:
            await election.run()
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    def leads_as_taken_over(self) -> bool:
        """Whether the leadership this instance took over still holds, unbroken: False once its
        lease ended, also when the key was won back since (a stall past the TTL)."""
        return self.election is None or (self.election.leading() and self.election.wins == self._won)

    @property
    def hot_standby(self) -> bool:
        """A leader-elected copy entry runs its query while standing by, reading nothing until
        it leads: failover skips the query's start. (A sampled entry's query starts when it
        takes over: its state comes from the checkpoint as it is then.)"""
        return bool(self.s.leader_election_name) and not self.s.sampling

    def _first_batch_reached(self) -> None:
        hook = self.on_first_batch
        if hook is None:
            return
        try:
            hook()
        except Exception as e:  # housekeeping only: the batch goes on
            self.log.debug("after the first batch's planning: %s", e)

    def planned(self) -> bool:
        """Whether the query's planning is over (its planner processes may go): it ran a batch,
        or it stands by idle, with nothing to plan until it leads."""
        if self.election is not None and not self.leading():
            q = self.query
            return not self.hot_standby or (
                q is not None and q.isActive and q.status.get("message") == "Waiting for data to arrive"
            )
        return self.query is not None and self.batch_started.is_set()

    def warmed(self) -> bool:
        """Whether a hot standby's query has run its first batch (the warm-up that reads
        nothing: replicator.spark.datasource), so a takeover does not wait for it."""
        q = self.query
        try:
            return q is not None and q.isActive and q.lastProgress is not None
        except Exception:  # the query ending between the two calls
            return False

    def leading(self) -> bool:
        """Whether this instance may copy the entry now (always, without an election)."""
        return self.election is None or self.election.leading()

    def take_over(self) -> None:
        """Just won the leadership: continue after the last copy in the target, whoever made
        it. A hot standby's running query starts reading there; a sampled entry's query starts
        from its checkpoint (its senders' state), publishing nothing the target holds."""
        assert self.sink is not None
        self.refuse_a_recreated_source()
        self._won = self.election.wins if self.election is not None else 0
        found = self.loop.run(self._last_copied(), 30)
        self.sink.handled_up_to(found or 0)
        self._floor_from_target = True
        self.sink.forget_target_tail()
        if self.sampling_sink is not None:
            # The floor is the target's last copy now: what a failed publish left missing below
            # it (this instance's, or the one's that led before, where they share state_store)
            # is published by the replay of its batch all the same.
            self.sampling_sink.resume(took_over=True)
        if found is None and not self.sink.floor:
            self.log.warning(
                "taking over: no copy of this entry among the target's last messages (other writers?); "
                "continuing from the checkpoint"
            )
        else:
            self.log.info("taking over after source sequence %d, the target's last copy", self.sink.floor)
        if self.hot_standby:
            self.catch_up()  # what this instance left in flight when it last led, if the target lacks it
            after = self.sink.floor if found is not None or self.sink.floor else None
            write_lease(str(lease_path(self.cfg, self.s)), after)
        self.took_over = True

    def stand_by(self) -> None:
        """The lease ended: the sinks already refuse to publish; stop reading too (the source
        connection stays: a sampled entry's query starts on it again when it takes over)."""
        if self.hot_standby:
            lease_path(self.cfg, self.s).unlink(missing_ok=True)
        else:
            self.stop_query(grace=0.5)
        self.took_over = False

    def _last_copy_in(self, left: InflightRange) -> int | None:
        """The source sequence of the target's last copy of ours, within the range `left` an
        earlier batch left in flight (0: none found; None: not read in 30 s). Not past the
        range: a copy above it is not this range's (a source stream recreated within the
        second its copies' identity keeps)."""
        try:
            found = self.loop.run(self._last_copied(), 30)
        except TimeoutError:
            # Never a stall: the record stays until a catch_up succeeds, so a read that always
            # times out (our last copy buried under large foreign messages) would stop the entry.
            self.log.warning("reading the target's last copy took over 30 s")
            return None
        return min(found or 0, left.last_seq)

    async def _last_copied(self) -> int | None:
        """The target's last copy of this entry (find_last_copied: None when not found)."""
        s = self.s
        target = await open_connection(s.target_url, s.target_tls, name=f"sr-target-setup-{s.name}")
        try:
            assert self.sink is not None
            return await find_last_copied(target, s.target_stream, self.sink.settings.owner)
        finally:
            await target.close()

    def stop_election(self) -> None:
        """Stop campaigning and give the key up (after the query has stopped)."""
        if self.election is None or self._election_run is None:
            return
        self.election.stop()
        with contextlib.suppress(Exception):
            self._election_run.result(5)

    def stop(self, grace: float = 10.0) -> None:
        self.stop_query(grace)
        if self.sampling_sink is not None:
            self.sampling_sink.close()
        elif self.sink is not None:
            self.sink.close()
            if self.can_copy_ahead():
                # How far the target acknowledged the copies ahead, the live copies and the
                # query's last batch, for a start that cannot see it in the target's tail.
                try:
                    self.note_live_progress()
                except OSError as e:
                    self.log.warning("the live copies' mark was not written (%s)", e)
        if self._source_nc is not None:
            try:
                self.loop.run(self._source_nc.close(), 5)
            except Exception as e:
                self.log.debug("closing source: %s", e)
            self._source_nc = None

    def stop_query(self, grace: float = 10.0) -> None:
        """Stop the query (letting its running batch end within `grace`); the sinks stay."""
        self.stop_live()
        if self.query is not None:
            # Let the running batch finish and start no other (the source admits nothing more
            # once the stopping file exists), then stop the idle query. Interrupting a batch is
            # safe (it is replayed) but makes Spark and its workers print cancelled jobs and
            # stack traces; while a backlog is read, a new batch starts the moment one ends.
            stopping = stopping_path(self.cfg, self.s)
            with contextlib.suppress(OSError):
                stopping.touch()
            deadline = time.monotonic() + grace
            with contextlib.suppress(Exception):
                while self.query.isActive and self.query.status.get("isTriggerActive"):
                    if time.monotonic() > deadline:
                        self.log.warning("the batch in flight did not end within %.0fs; abandoning it (it is "
                                    "read again on the next start)", grace)  # fmt: skip
                        break
                    time.sleep(0.05)
            try:
                self.query.stop()
            except Exception as e:  # a failed query may already be gone
                self.log.debug("stopping query: %s", e)
            stopping.unlink(missing_ok=True)
            self.query = None
