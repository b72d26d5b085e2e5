"""`heartbeats:`: a unix timestamp published to each configured subject every interval, so
end-to-end latency can be watched on a stream that is otherwise idle (as Choria's v0.8+ does:
the same headers, the same election key when `leader_election` is on)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from typing import Any

from replicator.aio import unless_stopped
from replicator.config import HeartbeatConfig, HeartbeatSubject
from replicator.election import Election
from replicator.metrics import metrics
from replicator.nats.connect import open_connection
from replicator.nats.urls import parse_nats_url

log = logging.getLogger(__name__)

ORIGINATOR_HEADER = "Choria-SR-Originator"
SUBJECT_HEADER = "Choria-SR-Subject"
PUBLISH_TIMEOUT_S = 2.0


def heartbeat_headers(cfg: HeartbeatConfig, sub: HeartbeatSubject, hostname: str) -> dict[str, str]:
    """A subject's own headers win over the shared ones; the two Choria headers come last."""
    return {**cfg.headers, **sub.headers, ORIGINATOR_HEADER: hostname, SUBJECT_HEADER: sub.subject}


def election_key(replicator: str) -> str:
    return f"SR_{replicator}_HB"


class Heartbeats:
    def __init__(self, cfg: HeartbeatConfig, replicator: str, hostname: str | None = None) -> None:
        self.cfg = cfg
        self.replicator = replicator
        self.hostname = hostname or socket.gethostname()
        self.election: Election | None = None
        self.published = 0
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_asked = False  # a stop before run() made its event

    def leading(self) -> bool:
        return self.election is None or self.election.leading()

    async def run(self) -> None:
        """Publish until stop(); connection losses are ridden out by the client."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        if self._stop_asked:
            self._stopping.set()
        where = parse_nats_url(self.cfg.url).redacted()
        # A server that does not answer is tried for ever: a stop ends that wait too.
        nc: Any = await unless_stopped(
            open_connection(self.cfg.url, self.cfg.tls, name="sr-heartbeats"), self._stopping.is_set
        )
        if nc is None or self._stopping.is_set():  # a connection that came as the stop did
            if nc is not None:
                with contextlib.suppress(Exception):
                    await nc.close()
            return
        m = metrics()
        m.heartbeat_subjects.labels(self.replicator).set(len(self.cfg.subjects))
        tasks = []
        try:
            if self.cfg.leader_election:
                self.election = Election(
                    nc, election_key(self.replicator), self.hostname, "heartbeats", replicator=self.replicator
                )
                tasks.append(asyncio.create_task(self.election.run()))
            log.info(
                "heartbeats to %s on %s%s",
                ", ".join(s.subject for s in self.cfg.subjects),
                where,
                " (sent by the elected leader)" if self.election else "",
            )
            tasks += [asyncio.create_task(self._beat(nc, s)) for s in self.cfg.subjects]
            await self._stopping.wait()
        finally:
            if self.election is not None:
                self.election.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
            with contextlib.suppress(Exception):
                await nc.close()

    async def _beat(self, nc: Any, sub: HeartbeatSubject) -> None:
        assert self._stopping is not None
        interval = (sub.interval or self.cfg.interval).total_seconds()
        headers = heartbeat_headers(self.cfg, sub, self.hostname)
        m = metrics()
        published = m.heartbeat_published.labels(self.replicator, sub.subject)
        errors = m.heartbeat_errors.labels(self.replicator, sub.subject)
        took = m.heartbeat_time.labels(self.replicator, sub.subject)
        paused = m.heartbeat_paused.labels(self.replicator, self.hostname)
        js = nc.jetstream()
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)
                return
            if not self.leading():
                paused.set(1)
                continue
            paused.set(0)
            started = time.monotonic()
            try:
                await js.publish(
                    sub.subject, str(int(time.time())).encode(), timeout=PUBLISH_TIMEOUT_S, headers=headers
                )
            except Exception as e:  # the next beat tries again
                errors.inc()
                log.error("heartbeat to %s failed: %s", sub.subject, str(e) or type(e).__name__)
                continue
            took.observe(time.monotonic() - started)
            published.inc()
            self.published += 1

    def stop(self) -> None:
        """Stop publishing (from any thread)."""
        self._stop_asked = True
        if self._loop is not None and self._stopping is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stopping.set)
