"""Runs a schedule against a real NATS server: paced publishes, acks, a log, progress.

Publishes go out at their scheduled wall time (scenario time / speedup). JetStream mode
pipelines `publish_async` with a bounded number in flight; an ack that fails or does not come
within `ack_timeout` is republished with the same `Nats-Msg-Id` (the stream drops a duplicate),
so a reconnect loses nothing and the schedule goes on. Core mode publishes without acks.
The emulator never falls behind silently: progress shows scheduled vs achieved rates and a
warning is logged while it lags.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import nats
import numpy as np
from nats.js.api import StreamConfig
from tenacity import retry, retry_if_exception, stop_after_delay, wait_fixed

from emulator.fleet import SALT_REQUEST, unit_hash
from emulator.payload import PayloadFactory
from emulator.schedule import Publishes, Schedule

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


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[Any]
    sent: float
    subject: str
    data: bytes
    headers: dict[str, str]
    row: str


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


def _no_room(e: Any) -> bool:
    description = str(getattr(e, "description", "") or "")
    return getattr(e, "err_code", None) == INSUFFICIENT_RESOURCES or (
        "maximum" in description and "exceeded" in description
    )


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
        self._pending: collections.deque[_Pending] = collections.deque()
        self._stop = asyncio.Event()
        self._log: IO[str] | None = None

    def stop(self) -> None:
        self._stop.set()

    async def run(self, create_stream: str | None = None, replicas: int = 1) -> RunStats:
        """Publish the schedule; `create_stream`: make that stream for the fleet's subjects first
        if it is missing, with `replicas` copies of each message."""
        nc = await nats.connect(
            self.url.split(","),
            name="fleet-emulator",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            pending_size=64 * 1024 * 1024,
            error_cb=self._on_error,
        )
        js = nc.jetstream(publish_async_max_pending=self.max_pending)
        if create_stream:
            await self._ensure_stream(js, create_stream, replicas)
        if self.log_path:
            self._log = self.log_path.open("w")
            self._log.write(LOG_HEADER)
        try:
            await self._run(nc, js)
        finally:
            if self._log:
                self._log.close()
            await nc.close()
        return self.stats

    async def _on_error(self, e: Exception) -> None:
        log.warning("NATS connection: %s", e)

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

    async def _run(self, nc: Any, js: Any) -> None:
        speedup = self.schedule.s.speedup
        wall0 = time.monotonic()
        self._unix0 = time.time()
        next_report = wall0 + 1.0
        warned_at = 0.0
        for _start, _end, pubs in self.schedule.ticks():
            if self._stop.is_set() or (self.stop_after and time.monotonic() - wall0 > self.stop_after):
                break
            if pubs is None:
                continue
            self.stats.scheduled += len(pubs)
            due = wall0 + pubs.t / speedup
            i, n = 0, len(pubs)
            while i < n:
                now = time.monotonic()
                if due[i] > now:
                    await asyncio.sleep(min(due[i] - now, 0.05))
                    continue
                # Everything due now (capped, so acks and progress keep flowing).
                j = min(n, int(np.searchsorted(due, now, side="right")), i + 2000)
                self.stats.max_behind_seconds = max(self.stats.max_behind_seconds, now - due[i])
                await self._publish_slice(nc, js, pubs, i, j)
                i = j
                await self._reap(js, final=False)
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
        await self._reap(js, final=True)
        if self.mode == "core":
            await nc.flush()
        self.stats.wall_seconds = time.monotonic() - wall0
        if self.progress:
            sys.stderr.write("\n")

    async def _publish_slice(self, nc: Any, js: Any, p: Publishes, i: int, j: int) -> None:
        speedup = self.schedule.s.speedup
        seed = self.schedule.s.seed
        fleet = self.schedule.fleet
        render = self.factory.render
        nodes = p.node[i:j].tolist()
        sizes = p.size[i:j].tolist()
        forces = p.force[i:j].tolist()
        times = p.t[i:j].tolist()
        uptimes = p.uptime[i:j].astype(np.int64).tolist()
        serials = p.serial[i:j].tolist()
        requests = (
            (unit_hash(seed, SALT_REQUEST, p.node[i:j], p.serial[i:j]) * 2**53).astype(np.int64).tolist()
        )
        rows: list[str] = []
        logging_rows = self._log is not None
        core = self.mode == "core"
        pending = self._pending
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
                headers = {"Nats-Msg-Id": f"{ident}:{serial}"}
                fut = await js.publish_async(subject, data, headers=headers)
                pending.append(_Pending(fut, time.monotonic(), subject, data, headers, row))
        # Rendering is timed on a sample (timing every record would cost more than rendering).
        if nodes:
            r0 = time.perf_counter()
            render(nodes[0], sizes[0], forces[0], int(unix0), uptimes[0], requests[0])
            self.stats.render_seconds += (time.perf_counter() - r0) * len(nodes)
        if rows and self._log:
            self._log.write("".join(rows))

    async def _reap(self, js: Any, final: bool) -> None:
        """Account for acknowledged publishes in send order; republish failed or late ones."""
        rows: list[str] = []
        deadline = time.monotonic() + 120 if final else 0.0
        while self._pending:
            head = self._pending[0]
            if not head.future.done():
                late = time.monotonic() - head.sent > self.ack_timeout
                if not final and not late:
                    break
                if final and not late:
                    await asyncio.wait([head.future], timeout=0.1)
                    continue
                head.future.cancel()
            self._pending.popleft()
            ack = None
            if not head.future.cancelled() and head.future.exception() is None:
                ack = head.future.result()
            else:
                ack = await self._republish(js, head)
            if ack is None:
                self.stats.failed += 1
                continue
            self.stats.published += 1
            self.stats.bytes += len(head.data)
            rows.append(f"{head.row},{ack.seq}\n")
            if final and time.monotonic() > deadline:
                break
        if rows and self._log:
            self._log.write("".join(rows))

    async def _republish(self, js: Any, p: _Pending) -> Any:
        """Synchronous retries with the same message id; gives up (counted as failed) after 60 s.
        A stream that has no room left fails the run at once: every later publish would wait
        out its 60 s the same way."""
        give_up = time.monotonic() + 60
        err: Exception | None = None
        while time.monotonic() < give_up and not self._stop.is_set():
            try:
                ack = await js.publish(p.subject, p.data, timeout=2, headers=p.headers)
                self.stats.republished += 1
                return ack
            except nats.js.errors.APIError as e:
                if _no_room(e):
                    raise StreamFull(
                        f"the stream has no room for {p.subject}: {e.description} (JetStream error "
                        f"{e.err_code}); give the server more storage (max_file_store) or the stream "
                        "higher limits, or run a shorter scenario"
                    ) from e
                err = e
                await asyncio.sleep(0.5)
            except Exception as e:
                err = e
                await asyncio.sleep(0.5)
        msg = f"gave up publishing {p.subject} after 60s: {err!r}"
        log.error(msg)
        if len(self.stats.errors) < 20:
            self.stats.errors.append(msg)
        return None

    def _report(self, elapsed: float, scenario_t: float, behind: float) -> None:
        st = self.stats
        speedup = self.schedule.s.speedup
        line = (
            f"[emulator] t={scenario_t:,.0f}s/{self.schedule.s.duration:,.0f}s "
            f"nodes={int(self.schedule.active.sum()):,} sent={st.published:,} "
            f"rate={st.published / max(elapsed, 1e-9):,.0f}/s "
            f"scheduled={st.scheduled / max(elapsed, 1e-9):,.0f}/s behind={max(0.0, behind):.2f}s "
            f"pending={len(self._pending):,} x{speedup:g}"
        )
        if self.progress:
            sys.stderr.write("\r" + line + "   ")
            sys.stderr.flush()
        elif int(elapsed) % 10 == 0:
            log.info(line)
