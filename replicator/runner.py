"""Runs configured streams until asked to stop; restarts a failed query from its checkpoint."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from replicator.aio import LoopThread
from replicator.backoff import Backoff
from replicator.config import Config, StreamConfig
from replicator.entry_files import entry_dir
from replicator.head_start import HeadStart
from replicator.heartbeat import Heartbeats
from replicator.metrics import metrics
from replicator.monitor import Readiness, StreamState, serve
from replicator.progress import PROGRESS_INTERVAL_S, Progress, slow_batch_line
from replicator.replication import QueryState, StreamReplication
from replicator.spark.early_jvm import EarlyJvm, JvmGone
from replicator.spark.internals import captured_error_texts, jvm_answers
from replicator.spark.listener import listen_to_batches
from replicator.spark.planners import SOURCE_CREATION_MODULES, planners_left, release_idle_planners
from replicator.spark.session import build_session
from replicator.spark.session_args import SessionArgs, resolve_master, session_args
from replicator.spark.warmup import warm_task_workers
from replicator.stop_deadline import StopDeadline, StopSteps
from replicator.stop_signals import StopSignals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# How long after the first release of Spark's planner processes those left busy are looked for
# again, once a second (a batch read by Spark's tasks starts its read planner as it runs).
PLANNERS_RETRY_S = 30.0

# A clean stop's bound, inside the shipped unit's TimeoutStopSec (60 s): on a loaded machine
# Spark's own stop of a running batch or a standalone cluster took over 25 s (seen in CI).
STOP_DEADLINE_S = 45.0


class Runner:
    def __init__(
        self,
        cfg: Config,
        streams: list[StreamConfig],
        spark_master: str | None = None,
        create_class_archive: bool = False,
        jvm: EarlyJvm | None = None,
    ) -> None:
        """`jvm`: Spark's JVM, launched early with `session_args` for these same arguments
        (replicator.spark.early_jvm); else it is launched as `run` begins."""
        self.cfg = cfg
        self.streams = streams
        self.master = resolve_master(cfg, spark_master)
        self.jvm = jvm
        self.stop_event = threading.Event()
        self.loop = LoopThread()
        self.replications = [StreamReplication(cfg, s, self.loop) for s in streams]
        self.spark: SparkSession | None = None
        self.planners_released = False
        # Until when a planner process left busy by the first release is looked for again.
        self._planners_retry_until: float | None = None
        self._planners_lock = threading.Lock()
        for r in self.replications:
            r.on_first_batch = self._release_planners_once_running
        self.readiness = Readiness()
        self.backoff = {r.label: Backoff() for r in self.replications}
        self.progress = {r.label: Progress() for r in self.replications}
        # Batches a stream's sink had handled when its query last started.
        self._batches_at_start: dict[str, int] = {}
        # Streams waiting to be started again, with when.
        self._retries: dict[str, _Retry] = {}
        # Copies a stream's sink had landed when it last failed.
        self._landed_at_failure: dict[str, int] = {}
        for r in self.replications:
            self.readiness.set(r.label, StreamState.STARTING)
        self.heartbeats: Heartbeats | None = None
        self._heartbeats_run: concurrent.futures.Future[None] | None = None
        # From the first request to stop, the process ends within STOP_DEADLINE_S.
        self._stop_steps = StopSteps()
        self._stop_deadline = StopDeadline(STOP_DEADLINE_S, self._stop_steps)
        self._stop_signals: StopSignals | None = None
        # Set by `stream-replicator jvm-archive`: the JVM dumps its loaded classes when it ends.
        self.create_class_archive = create_class_archive

    def session_args(self) -> SessionArgs:
        return session_args(self.cfg, self.streams, self.master, self.create_class_archive)

    def install_stop_signals(self) -> None:
        """SIGTERM and SIGINT ask this runner to stop, through a thread of their own
        (replicator.stop_signals: a handler calling request_stop could deadlock)."""
        if self._stop_signals is None:
            self._stop_signals = StopSignals(self.request_stop)
        self._stop_signals.install()

    def ignore_stop_signals(self) -> None:
        """The run has ended: see StopSignals.ignore_after_stop."""
        if self._stop_signals is not None:
            self._stop_signals.ignore_after_stop()

    def _build_session(self, args: SessionArgs) -> SparkSession | None:
        """The session, built on a thread of its own: PySpark gives a context made on the main
        thread a SIGINT handler that raises KeyboardInterrupt wherever that thread is (mid-call
        to the JVM, say), which would skip the clean stop. Off the main thread it installs none,
        and a Ctrl-C meanwhile goes to ours (replicator.stop_signals).

        None when asked to stop first: no query has started, so nothing waits on the session,
        and a start that takes longer than the stop deadline (53 s was seen on a loaded CI
        machine) must not turn a clean stop into a timed-out one. The builder is left to end
        with this process, and the JVM with it (it exits when its stdin closes)."""
        built: list[SparkSession] = []
        failed: list[BaseException] = []
        ended = threading.Event()

        def build() -> None:
            try:
                built.append(build_session(**args.kwargs(), launched=self.jvm))
            except BaseException as e:  # raised again on the main thread, as if built there
                failed.append(e)
            finally:
                ended.set()

        builder = threading.Thread(target=build, name="spark-session", daemon=True)
        watched, self._stop_deadline.watched = self._stop_deadline.watched, builder
        builder.start()
        while not ended.wait(0.1):
            if self.stop_event.is_set():
                log.info("stopped while Spark started: no query had begun; leaving its start")
                self._stop_deadline.watched = watched
                return None
        self._stop_deadline.watched = watched  # a stop stuck in the start names the builder's call
        if failed:
            raise failed[0]
        return built[0]

    def _on_session(self, spark: SparkSession) -> None:
        log.info("Spark started (master %s)", spark.sparkContext.master)
        listen_to_batches(spark, self._on_batch)
        if self.cfg.profiling and spark.sparkContext.uiWebUrl:
            log.info("profiling: Spark's web UI at %s", spark.sparkContext.uiWebUrl)
        # Spark's task workers start beside the first query's planning, not after it (when any
        # entry's batches go through them: ~90 MB each otherwise idle).
        master = str(spark.sparkContext.master)
        if any(r.reads_through_spark(master) for r in self.replications):
            warm_task_workers(spark, sampling=any(r.s.sampling for r in self.replications))

    def request_stop(self, *_: object) -> None:
        if not self.stop_event.is_set():
            log.info("stop requested; finishing the current batches")
        self.stop_event.set()
        self._stop_deadline.start()

    def run(self, on_progress: Callable[[Runner], None] | None = None) -> int:
        self._stop_deadline.watched = threading.current_thread()
        self.install_stop_signals()  # for every caller (the CLI, the demo, jvm-archive)
        if serve(self.cfg.monitor_port, self.readiness, self.cfg.monitor_address, self.cfg.profiling):
            log.info(
                "monitoring on http://%s:%d (/metrics, /healthz, /readyz)",
                self.cfg.monitor_address,
                self.cfg.monitor_port,
            )
        if not self.replications:
            self.readiness.set_without_streams()  # before they start: their failure must win
            self._start_heartbeats()
            return self._heartbeats_only()
        self._start_heartbeats()
        args = self.session_args()
        if self.jvm is None:  # its start runs beside the sources' (they may take a while)
            self.jvm = EarlyJvm.start(args)
        for r in self.replications:
            self.readiness.set(r.label, StreamState.WAITING_FOR_SOURCE)
            if not r.prepare(self._stop_preparing):
                if not self.stop_event.is_set() and self.jvm is not None and (e := self.jvm.failed()):
                    # The JVM failed while a source was awaited: no use waiting on.
                    self.jvm = None  # nothing left to abandon: its error is the run's
                    if isinstance(e, JvmGone):
                        return self._exit_jvm_gone(e)
                    raise e
                self._stop_heartbeats()
                self._abandon_jvm()
                self._stop_deadline.done()  # a stop while a source was awaited: done
                return 0
            self.readiness.set(r.label, StreamState.STARTING)
        # The first copies go out while the session starts, not after it (replicator.head_start).
        ahead = HeadStart(self.replications, self.stop_event.is_set)
        ahead.start()
        log.info("starting Spark")
        try:
            try:
                self.spark = self._build_session(args)
            except JvmGone as e:
                return self._exit_jvm_gone(e)
            if self.spark is not None:
                self._on_session(self.spark)
        finally:
            # Before any query starts: one thing at a time publishes an entry's copies. On a
            # stop, closing the sinks waits for the chunk being published (bounded).
            ahead.stop(abandon=self.stop_event.is_set)
        if self.stop_event.is_set() or self.spark is None:  # asked to stop while Spark started
            self.shutdown()
            return 0
        for r in self.replications:
            r.start_election()
            if r.election is None or r.hot_standby:
                self._start(r)
            else:
                self.readiness.set(r.label, StreamState.STANDBY)
        exit_code = 0
        try:
            # Every 0.1 s until the planner processes are first released (each query's first
            # batch does it as it begins; this catches a standby's), then every 1 s, which
            # also stops any left busy then (_release_planners_once_running).
            next_check = 0.0
            next_progress = time.monotonic() + PROGRESS_INTERVAL_S
            while not self.stop_event.wait(1.0 if self.planners_released else 0.1):
                if not self.planners_released or self._planners_retry_until is not None:
                    self._release_planners_once_running()
                if time.monotonic() < next_check:
                    continue
                next_check = time.monotonic() + 1.0
                if not jvm_answers(self.spark):
                    # Nothing can be copied without it, and retrying would hide that from the
                    # service manager: exit, and let it restart the whole process.
                    log.error("Spark's JVM is gone; exiting (exit status 1) so that the service is restarted")
                    exit_code = 1
                    break
                for r in self.replications:
                    self._supervise(r)
                    r.update_lag()
                if time.monotonic() >= next_progress:
                    next_progress += PROGRESS_INTERVAL_S
                    self._log_progress()
                if on_progress:
                    on_progress(self)
        finally:
            self.shutdown()
        return exit_code

    def _supervise(self, r: StreamReplication) -> None:
        if r.election is not None and self._follow_election(r):
            return
        if r.label in self._retries:
            self._retry_when_due(r)
            return
        assert r.sink is not None
        state, err = r.query_state()
        if state is QueryState.RUNNING:
            if r.sink.batches > self._batches_at_start.get(r.label, 0):
                self.backoff[r.label].reset()  # running and making progress again
            return
        if state is QueryState.PUBLISH_FAILED and err is not None:
            # A batch Spark already committed could not be published: stop reading, publish it
            # again (catch_up) and resume, as for a failed batch.
            r.log.error("publishing a batch failed (%s)%s", _first_line(err), _hint(err, r))
        elif state is QueryState.FAILED:
            r.log.error("batch failed (%s)%s", _first_line(err) if err else "stopped", _hint(err, r))
        if state in (QueryState.PUBLISH_FAILED, QueryState.FAILED):
            r.batch_unsettled = True
        r.drop_query()
        r.sink.labels.of(metrics().errors).inc()
        self._schedule_retry(r)

    def _follow_election(self, r: StreamReplication) -> bool:
        """Start or stop copying a leader-elected entry as its election goes; True when it is
        not for _supervise to look at now. A hot standby's query runs (and is kept running by
        _supervise) while it stands by; a sampled entry's query runs only while it leads."""
        if r.took_over and not r.leads_as_taken_over():
            # The lease ended, or ended and was won back since the last look (the process
            # stalled past the TTL): what the query read or planned meanwhile is not trusted;
            # a takeover starts again from the target's copy (replicator.spark.read_lease).
            self._retries.pop(r.label, None)
            r.stand_by()
            r.log.info("standing by")
        if not r.leading():
            if r.hot_standby and (r.label in self._retries or not r.query_active()):
                return False  # its idle query failed or waits to be retried
            if r.hot_standby and not r.warmed():
                return True  # ready once the idle query's first batch (its warm-up) is over
            # A sampled entry that stepped aside after a failure retries only once it leads
            # again: until then it is not ready (its start failed), though it campaigns.
            failed = not r.hot_standby and r.label in self._retries
            self.readiness.set(r.label, StreamState.RETRYING if failed else StreamState.STANDBY)
            return True
        if not r.took_over:
            retry = self._retries.get(r.label)
            if retry is not None and time.monotonic() < retry.due:
                return True
            self._retries.pop(r.label, None)
            try:
                r.take_over()
            except Exception as e:
                r.log.error("could not take over (%s)", _first_line(e))
                self._schedule_retry(r)
                return True
            if r.hot_standby and r.query_active():
                self.readiness.set(r.label, StreamState.REPLICATING)
            else:
                self._start(r)
            return True
        return False

    def _schedule_retry(self, r: StreamReplication) -> None:
        """Start `r` again after its backoff, or as soon as its servers answer again if they
        stopped answering meanwhile. Other streams are supervised while it waits."""
        self.readiness.set(r.label, StreamState.RETRYING)
        if r.sink is not None:
            # Copies landed since the last failure (even in a batch that then failed): this is
            # a fresh fault, not the same one again.
            if r.sink.landed > self._landed_at_failure.get(r.label, -1):
                self.backoff[r.label].reset()
            self._landed_at_failure[r.label] = r.sink.landed
        wait = self.backoff[r.label].next_wait()
        if r.election is not None and r.leading() and not r.owes_copies():
            # This instance cannot copy the entry now; a peer may. It hands the key over and
            # leads again after the wait only if no peer took it (replicator.election). Not
            # while it owes copies left in flight: a peer would continue past them.
            r.election.step_aside(wait)
            r.stand_by()
        r.log.info("retrying from the checkpoint in %.0fs", wait)
        # Servers not answering now (a link down, a restart) are retried the moment they do.
        self._retries[r.label] = _Retry(time.monotonic() + wait, servers_were_down=not r.servers_answer())

    def _retry_when_due(self, r: StreamReplication) -> None:
        retry = self._retries[r.label]
        if time.monotonic() < retry.due:
            if not r.servers_answer():
                retry.servers_were_down = True
                return
            if not retry.servers_were_down:
                return
            r.log.info("source and target answer again; retrying now")
        del self._retries[r.label]
        self._start(r)

    def _on_batch(self, progress: dict[str, Any]) -> None:
        """A query's batch ended (replicator.spark.listener): its steps go to the metrics, and
        a slow one gets a line."""
        r = next((r for r in self.replications if r.query_name == progress.get("name")), None)
        if r is None or r.sink is None:
            return
        r.batch_committed()
        steps = r.sink.labels.values()
        for step, ms in (progress.get("durationMs") or {}).items():
            metrics().batch_steps.labels(*steps, step).observe(float(ms) / 1000)
        read_here = r.small_batches.rows.get(progress.get("batchId", -1)) if r.small_batches else None
        line = slow_batch_line(progress, rows=read_here)
        if line is not None:
            r.log.info(line)
        elif r.log.isEnabledFor(logging.DEBUG):
            # At debug every batch's steps, not only a slow one's (a sampled one's split: sampling.py).
            r.log.debug(slow_batch_line(progress, threshold_s=0.0, rows=read_here))

    def _log_progress(self) -> None:
        now = time.monotonic()
        for r in self.replications:
            if r.sink is not None:
                t = r.sink.totals
                r.log.info(self.progress[r.label].line(now, t.received, t.copied, r.lag))

    def _release_planners_once_running(self) -> None:
        """Once every query has started a batch, its planning is over: stop the processes
        Spark kept from planning them (replicator.spark.planners; ~115 MB a step). Called by
        this thread's loop and by each query's first batch before its sink reads (so the
        planners are gone before the driver's first read grows it: the start's peak RSS). A
        query being started is not planned() (_start), so none is being planned now. One still
        busy then (or started by the batch itself, when Spark's tasks read it) is stopped by a
        later call, for up to PLANNERS_RETRY_S: Spark can count a stopped worker as busy until
        its collector runs, and such a daemon is then left (memory only), as on an older Spark."""
        with self._planners_lock:
            if self.spark is None or (self.planners_released and self._planners_retry_until is None):
                return
            if not all(r.planned() for r in self.replications):
                return
            release_idle_planners(self.spark)
            now = time.monotonic()
            if not self.planners_released:
                self.planners_released = True
                self._planners_retry_until = now + PLANNERS_RETRY_S
            if now >= (self._planners_retry_until or now) or not planners_left(self.spark):
                self._planners_retry_until = None

    def _start(self, r: StreamReplication) -> None:
        """Start a stream's query; a failure (say, the target refusing what was left in flight)
        is retried by _supervise with backoff, not fatal."""
        assert self.spark is not None
        with self._planners_lock:
            # Not planned() from here (another query's first batch may release planners): the
            # entry's earlier query may still be stopping, with a batch started.
            r.batch_started.clear()
            self.planners_released = False
            self._planners_retry_until = None
        try:
            r.start(self.spark)
        except Exception as e:
            r.log.error("could not start (%s)%s", _first_line(e), _hint(e, r))
            self._schedule_retry(r)
        else:
            if r.leading():
                self.readiness.set(r.label, StreamState.REPLICATING)
            elif not r.hot_standby:
                self.readiness.set(r.label, StreamState.STANDBY)
            assert r.sink is not None
            self._batches_at_start[r.label] = r.sink.batches
            # Looking up and creating the data source ran on this thread, in start(): those
            # processes can go now. Planning its reads runs on the query's own thread, later.
            release_idle_planners(self.spark, SOURCE_CREATION_MODULES)

    def _heartbeats_only(self) -> int:
        """A file with heartbeats and no streams (Choria's runs it): no Spark, only heartbeats."""
        log.info("no streams configured: sending heartbeats only")
        self.install_stop_signals()
        try:
            self.stop_event.wait()
        finally:
            self.shutdown()
        return 0

    def _start_heartbeats(self) -> None:
        if self.cfg.heartbeats is None:
            return
        self.heartbeats = Heartbeats(self.cfg.heartbeats, self.cfg.name)
        run = self.loop.submit(self.heartbeats.run())

        def ended(f: concurrent.futures.Future[None]) -> None:
            e = None if f.cancelled() else f.exception()
            if e is not None:
                log.error("heartbeats stopped: %s", _first_line(e))
                if not self.replications:
                    self.readiness.set_without_streams(False)  # nothing left doing its job

        run.add_done_callback(ended)
        self._heartbeats_run = run

    def _stop_heartbeats(self) -> None:
        if self.heartbeats is not None and self._heartbeats_run is not None:
            self.heartbeats.stop()
            with contextlib.suppress(Exception):
                self._heartbeats_run.result(6)

    def _exit_jvm_gone(self, e: JvmGone) -> int:
        # As for a JVM that dies under a running session: exit 1, for the service to restart.
        log.error("%s; exiting (exit status 1) so that the service is restarted", e)
        self._stop_heartbeats()
        self._stop_deadline.done()
        return 1

    def _stop_preparing(self) -> bool:
        """Whether to stop waiting for a source stream: asked to stop, or Spark's JVM, launched
        meanwhile, cannot serve the run (its error is then raised: replicator.spark.early_jvm)."""
        return self.stop_event.is_set() or (self.jvm is not None and self.jvm.failed() is not None)

    def _abandon_jvm(self) -> None:
        """The run ends before its session started: a launch of the JVM still under way is let
        finish (bounded), not cut off as this process exits; the JVM ends with this process."""
        if self.jvm is not None:
            self.jvm.abandon()

    def shutdown(self) -> None:
        """Stop queries and Spark; bounded, so SIGTERM always ends the process in time: the
        deadline runs from the request to stop (or from here, when the run ends of itself)."""
        done = threading.Event()
        steps = self._stop_steps
        self._stop_deadline.start()

        def _stop() -> None:
            for r in self.replications:
                self.readiness.set(r.label, StreamState.STOPPED)
                with steps.step(f"{r.label}'s query"):
                    r.stop()
                with steps.step(f"{r.label}'s election"):
                    r.stop_election()  # after the query: a standby takes over once nothing is in flight
            with steps.step("the heartbeats"):
                self._stop_heartbeats()
            if self.spark is not None:
                with steps.step("Spark"):
                    try:
                        self.spark.stop()
                    except Exception as e:  # its JVM already gone: nothing left to stop
                        log.debug("stopping Spark: %s", e)
            else:
                with steps.step("Spark's JVM launch"):
                    self._abandon_jvm()
            self.loop.stop()
            done.set()

        threading.Thread(target=_stop, name="shutdown", daemon=True).start()
        if not done.wait(self._stop_deadline.remaining()):
            self._stop_deadline.expire()  # logs where it was, and exits
        self._stop_deadline.done()
        log.info("stopped")


@dataclass
class _Retry:
    due: float  # time.monotonic() at which the stream is started again
    # Whether its servers stopped answering while it waited: once they answer again, the
    # retry need not wait out its backoff (a restarted server, a link back up).
    servers_were_down: bool = False


_ERROR_LINE = re.compile(r"^(?:: |Caused by: )?(?:[\w.$]+\.)?(\w+(?:Error|Exception)|UnexpectedEOF): (.+)$")


def _first_line(e: BaseException) -> str:
    """One line saying what went wrong. A failed batch's error is Spark's wrapper (say "Exception
    thrown in awaitResult") around a Java cause or a Python traceback: the innermost
    `SomeError: message` line in the chain of causes is the reason."""
    lines = [line.strip() for text in captured_error_texts(e) for line in text.strip().splitlines()]
    reasons = [m for m in map(_ERROR_LINE.match, lines) if m]
    if reasons:
        return f"{reasons[-1].group(1)}: {reasons[-1].group(2)}"
    return (lines or [type(e).__name__])[0]


# Below this much free space, a "no space left" error is blamed on the state store's filesystem.
_STATE_STORE_NEARLY_FULL = 16 * 1024 * 1024


def _hint(e: BaseException | None, r: StreamReplication) -> str:
    """What to do about an error the user can fix on this machine (a full disk); else nothing."""
    if e is None or not any("No space left on device" in t for t in captured_error_texts(e)):
        return ""
    where = entry_dir(r.cfg, r.s)
    try:
        st = os.statvfs(where if where.exists() else r.cfg.state_store)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = 0
    if free < _STATE_STORE_NEARLY_FULL:
        return (
            f": the state store's filesystem is full ({where}, {free // 1024:,} KiB free): free space "
            "there or move state_store; the replicator retries and continues where it stopped"
        )
    return (
        ": a disk Spark writes to is full (its local directory, spark.local.dir, else /tmp): free "
        "space there; the replicator retries and continues where it stopped"
    )
