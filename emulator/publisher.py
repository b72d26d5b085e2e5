"""Runs a schedule against a real NATS server: paced publishes, acks, a log, progress.

Publishes go out at their scheduled wall time (scenario time / speedup). JetStream mode sends
everything due at once as one pipelined run of publishes whose every ack is checked, through
the replicator's own publisher (replicator.nats.publisher, cheaper per message than nats-py's
`publish_async`: `make bench-emulator`'s figures are in docs/performance.md, so the fleet leaves
more of a shared machine to what it tests). What a server refused, or did not acknowledge within `ack_timeout`, is published again
with the same `Nats-Msg-Id` (the stream drops a duplicate, and its ack names the first copy's
sequence), so a reconnect loses nothing and the schedule goes on. Core mode publishes without
acks. The emulator never falls behind silently: progress shows scheduled vs achieved rates and
a warning is logged while it lags.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import nats
import numpy as np
from nats.aio.client import Client
from nats.js.api import StreamConfig
from tenacity import retry, retry_if_exception, stop_after_delay, wait_fixed

from emulator.fleet import SALT_REQUEST, unit_hash
from emulator.payload import PayloadFactory
from emulator.schedule import Publishes, Schedule
from replicator.nats.connect import open_connection
from replicator.nats.publisher import ANY_STREAM, PipelinedPublisher, PublishError, Refusal

log = logging.getLogger(__name__)

LOG_HEADER = "t,node,size,force,seq\n"


# A cluster that has just started may not know all its peers yet: a stream of several replicas
# is refused with "no suitable peers for placement" (10005), or JetStream is not ready (10008),
# for a few seconds. Asked again for this long.
CLUSTER_FORMING_S = 30.0


def _cluster_still_forming(e: BaseException) -> bool:
    return isinstance(e, nats.js.errors.APIError) and e.err_code in (10005, 10008)


@dataclass
class RunStats:
    scheduled: int = 0
    published: int = 0
    republished: int = 0
    failed: int = 0
    bytes: int = 0
    wall_seconds: float = 0.0
    render_seconds: float = 0.0
    max_behind_seconds: float = 0.0
    mode: str = "jetstream"
    errors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.published / self.wall_seconds if self.wall_seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rate"] = round(self.rate, 1)
        d["render_us_per_msg"] = round(1e6 * self.render_seconds / max(1, self.published), 2)
        return d


def stream_subjects(subject_template: str) -> list[str]:
    """The stream subjects that hold a fleet's subjects (identities contain dots)."""
    prefix, _, rest = subject_template.partition("{identity}")
    if rest:
        raise ValueError("--create-stream needs fleet.subject to end with {identity}")
    return [prefix + ">"]


# JetStream's "insufficient resources": the server's storage for streams is used up.
INSUFFICIENT_RESOURCES = 10023


class StreamFull(ValueError):
    """The stream or its server has no room for the fleet's messages (a one-line reason)."""


def _no_room(r: Refusal) -> bool:
    return r.code == INSUFFICIENT_RESOURCES or ("maximum" in r.reason and "exceeded" in r.reason)


# Publishes go out in batches at most this far apart: a message is at most this late, and each
# batch's fixed cost (its slices of the schedule, one round of acks) is shared by ~this much of
# the fleet's rate (woken for every message's due time, a 6,660 msg/s fleet sent ~3 a batch).
PACING_S = 0.01
MAX_BATCH = 2000

# How long a message the server refused or did not acknowledge is published again before it
# counts as failed.
GIVE_UP_S = 60.0
RETRY_WAIT_S = 0.5


class FleetPublisher:
    def __init__(
        self,
        schedule: Schedule,
        url: str,
        mode: Literal["jetstream", "core"] = "jetstream",
        log_path: Path | None = None,
        max_pending: int = 8000,
        ack_timeout: float = 5.0,
        progress: bool | None = None,
        stop_after: float | None = None,
    ) -> None:
        self.schedule = schedule
        s = schedule.s
        self.factory = PayloadFactory(schedule.fleet, s.fleet.sizes.min, s.fleet.force_field)
        self.url = url
        self.mode = mode
        self.log_path = log_path
        self.max_pending = max_pending
        self.ack_timeout = ack_timeout
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.stop_after = stop_after
        self.stats = RunStats(mode=mode)
        self._subj_pre, _, self._subj_post = s.fleet.subject.partition("{identity}")
        self._stop = asyncio.Event()
        self._abandon = False
        self._told_draining = False
        self._log: IO[str] | None = None

    def stop(self) -> None:
        """The first stop publishes nothing new but still stores what was already sent (going
        again up to GIVE_UP_S), so a stop during a server's hiccup fails nothing; a second stop
        gives those up too."""
        if self._stop.is_set():
            self._abandon = True
        self._stop.set()

    async def run(self, create_stream: str | None = None, replicas: int = 1) -> RunStats:
        """Publish the schedule; `create_stream`: make that stream for the fleet's subjects first
        if it is missing, with `replicas` copies of each message."""
        publisher: PipelinedPublisher | None = None
        if self.mode == "core":
            # nats-py's own client: it sends what a reconnect held back once reconnected, where
            # the replicator's drops it (its publisher publishes that again, acked).
            nc: Client = await nats.connect(
                self.url.split(","),
                name="fleet-emulator",
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                pending_size=64 * 1024 * 1024,
                error_cb=self._on_error,
            )
        else:
            nc = await open_connection(self.url, name="fleet-emulator", reconnect_time_wait=0.5)
            publisher = PipelinedPublisher(nc, ANY_STREAM, self.max_pending)
        try:
            if create_stream:
                await self._ensure_stream(nc.jetstream(), create_stream, replicas)
            if self.log_path:
                self._log = self.log_path.open("w")
                self._log.write(LOG_HEADER)
            await self._run(nc, publisher)
        finally:
            if self._log:
                self._log.close()
            await nc.close()
        return self.stats

    async def _on_error(self, e: Exception) -> None:
        log.warning("NATS connection: %s", e)  # one line (nats-py's own handler logs a traceback)

    @retry(
        retry=retry_if_exception(_cluster_still_forming),
        wait=wait_fixed(0.5),
        stop=stop_after_delay(CLUSTER_FORMING_S),
        reraise=True,
    )
    async def _ensure_stream(self, js: Any, name: str, replicas: int) -> None:
        try:
            await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            subjects = stream_subjects(self.schedule.s.fleet.subject)
            await js.add_stream(
                StreamConfig(name=name, subjects=subjects, allow_direct=True, num_replicas=replicas)
            )
            log.info("created stream %s (%s)", name, subjects[0])

    async def _run(self, nc: Client, publisher: PipelinedPublisher | None) -> None:
        speedup = self.schedule.s.speedup
        wall0 = time.monotonic()
        self._unix0 = time.time()
        next_report = wall0 + 1.0
        next_batch = wall0
        warned_at = 0.0
        for _start, _end, pubs in self.schedule.ticks():
            if self._stop.is_set() or (self.stop_after and time.monotonic() - wall0 > self.stop_after):
                break
            if pubs is None:
                continue
            self.stats.scheduled += len(pubs)
            due = wall0 + pubs.t / speedup
            requests = self._requests(pubs)
            i, n = 0, len(pubs)
            while i < n and not self._stop.is_set():  # a stop sends nothing new, even mid-tick
                now = time.monotonic()
                wait = max(due[i], next_batch) - now
                if wait > 0:
                    await asyncio.sleep(min(wait, 0.05))
                    continue
                # Everything due now (capped, so acks and progress keep flowing).
                j = min(n, int(np.searchsorted(due, now, side="right")), i + MAX_BATCH)
                next_batch = now + PACING_S if j < i + MAX_BATCH else now  # a full batch: no pause
                self.stats.max_behind_seconds = max(self.stats.max_behind_seconds, now - due[i])
                await self._publish_slice(nc, publisher, pubs, requests, i, j)
                i = j
                if now >= next_report:
                    next_report = now + 1.0
                    behind = now - due[i - 1]
                    self._report(now - wall0, _end, behind)
                    if behind > 1.0 and now - warned_at > 10:
                        warned_at = now
                        log.warning(
                            "falling behind schedule by %.1fs (achieving %.0f msg/s): the fleet is larger "
                            "than one process can publish; shard it (--shard i/N) or lower speedup",
                            behind,
                            self.stats.published / max(1e-9, now - wall0),
                        )
        if self.mode == "core":
            await nc.flush()
        self.stats.wall_seconds = time.monotonic() - wall0
        if self.progress:
            sys.stderr.write("\n")

    def _requests(self, p: Publishes) -> list[int]:
        """Each publish's request id (in its payload), for a whole tick at once: numpy's cost
        per call would otherwise be paid per slice."""
        seed = self.schedule.s.seed
        return (unit_hash(seed, SALT_REQUEST, p.node, p.serial) * 2**53).astype(np.int64).tolist()

    async def _publish_slice(
        self,
        nc: Client,
        publisher: PipelinedPublisher | None,
        p: Publishes,
        all_requests: list[int],
        i: int,
        j: int,
    ) -> None:
        speedup = self.schedule.s.speedup
        fleet = self.schedule.fleet
        render = self.factory.render
        nodes = p.node[i:j].tolist()
        sizes = p.size[i:j].tolist()
        forces = p.force[i:j].tolist()
        times = p.t[i:j].tolist()
        uptimes = p.uptime[i:j].astype(np.int64).tolist()
        serials = p.serial[i:j].tolist()
        requests = all_requests[i:j]
        rows: list[str] = []
        logging_rows = self._log is not None
        core = self.mode == "core"
        messages: list[tuple[str, bytes, bytes]] = []
        unix0 = self._unix0
        for node, size, force, t, up, serial, req in zip(
            nodes, sizes, forces, times, uptimes, serials, requests, strict=True
        ):
            ident = fleet.identity(node)
            data = render(node, size, force, int(unix0 + t / speedup), up, req, ident)
            subject = self._subj_pre + ident + self._subj_post
            row = f"{t:.3f},{ident},{size},{int(force)}" if logging_rows else ""
            if core:
                await nc.publish(subject, data)
                if logging_rows:
                    rows.append(row + ",\n")
                self.stats.published += 1
                self.stats.bytes += len(data)
            else:
                messages.append((subject, data, f"Nats-Msg-Id: {ident}:{serial}\r\n".encode()))
                rows.append(row)
        if messages:
            assert publisher is not None  # JetStream mode has one
            seqs = await self._publish_acked(publisher, messages)
            stored = [k for k, seq in enumerate(seqs) if seq]
            self.stats.published += len(stored)
            self.stats.failed += len(seqs) - len(stored)
            self.stats.bytes += sum(len(messages[k][1]) for k in stored)
            rows = [f"{rows[k]},{seqs[k]}\n" for k in stored] if logging_rows else []
        # Rendering is timed on a sample (timing every record would cost more than rendering).
        if nodes:
            r0 = time.perf_counter()
            render(nodes[0], sizes[0], forces[0], int(unix0), uptimes[0], requests[0])
            self.stats.render_seconds += (time.perf_counter() - r0) * len(nodes)
        if rows and self._log:
            self._log.write("".join(rows))

    async def _publish_acked(
        self, publisher: PipelinedPublisher, messages: list[tuple[str, bytes, bytes]]
    ) -> list[int]:
        """Publish `messages` in order, every one acked; what was refused or not acknowledged in
        time goes again (same `Nats-Msg-Id`) until GIVE_UP_S. Each message's stream sequence,
        0 for one that never got stored. A stream with no room left fails the run at once:
        every later publish would wait out GIVE_UP_S the same way."""
        seqs = [0] * len(messages)
        todo = list(range(len(messages)))
        give_up = time.monotonic() + GIVE_UP_S
        again = False
        while True:
            why = ""
            acked: dict[int, int] = {}  # by index in `todo`; kept when the publish raises
            try:
                outcome = await publisher.publish((messages[k] for k in todo), self.ack_timeout, seqs=acked)
            except (PublishError, nats.errors.ConnectionReconnectingError) as e:
                why = str(e)  # the connection lost, or acks late: what no ack vouched for, again
            else:
                for r in outcome.failures:
                    if _no_room(r):
                        raise StreamFull(
                            f"the stream has no room for {messages[todo[r.index]][0]}: {r.reason}; give the "
                            "server more storage (max_file_store) or the stream higher limits, or run a "
                            "shorter scenario"
                        )
                    why = r.reason
            for index, seq in acked.items():
                seqs[todo[index]] = seq
            if again:
                self.stats.republished += sum(1 for k in todo if seqs[k])
            todo = [k for k in todo if not seqs[k]]
            if not todo:
                return seqs
            if self._abandon:
                return seqs  # counted as failed: stopped twice before they were stored
            if self._stop.is_set() and not self._told_draining:
                self._told_draining = True
                log.warning(
                    "stopping: %d sent publishes not stored yet go again for up to %.0fs; stop again "
                    "(Ctrl-C) to give them up",
                    len(todo),
                    max(0.0, give_up - time.monotonic()),
                )
            if time.monotonic() >= give_up:
                for k in todo[: max(0, 20 - len(self.stats.errors))]:
                    msg = f"gave up publishing {messages[k][0]} after {GIVE_UP_S:.0f}s: {why}"
                    log.error(msg)
                    self.stats.errors.append(msg)
                return seqs
            again = True
            await asyncio.sleep(RETRY_WAIT_S)

    def _report(self, elapsed: float, scenario_t: float, behind: float) -> None:
        st = self.stats
        speedup = self.schedule.s.speedup
        line = (
            f"[emulator] t={scenario_t:,.0f}s/{self.schedule.s.duration:,.0f}s "
            f"nodes={int(self.schedule.active.sum()):,} sent={st.published:,} "
            f"rate={st.published / max(elapsed, 1e-9):,.0f}/s "
            f"scheduled={st.scheduled / max(elapsed, 1e-9):,.0f}/s behind={max(0.0, behind):.2f}s "
            f"x{speedup:g}"
        )
        if self.progress:
            sys.stderr.write("\r" + line + "   ")
            sys.stderr.flush()
        elif int(elapsed) % 10 == 0:
            log.info(line)
