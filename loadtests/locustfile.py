"""Locust users that act as fleet nodes publishing registration records into JetStream.

Every request is a JetStream publish that the server acknowledges; its response time is the
publish-to-ack latency, so what locust counts as a success is a message stored in the stream.
Settings come from the environment (so the same file runs headless here and as distributed
locust on EC2): SOURCE_URL (or --host), SPEEDUP (node interval = 300 s / SPEEDUP, default
300: one record per user per second), RECORD_SIZE (bytes; default: the emulator's size
distribution), METRICS_URL (the replicator's Prometheus endpoint; its copy rate and lag are
reported as locust stats of type REPLICATOR), PUBLISH_TIMEOUT (s, default 5).
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gevent
from locust import User, constant_pacing, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from harness.scrape import scrape
from loadtests.natsbridge import AsyncioBridge, Interrupted

SUBJECT_PREFIX = "choria.stream.input.registration."
SPEEDUP = float(os.environ.get("SPEEDUP", "300"))
RECORD_SIZE = int(os.environ.get("RECORD_SIZE", "0"))
PUBLISH_TIMEOUT = float(os.environ.get("PUBLISH_TIMEOUT", "5"))
METRICS_URL = os.environ.get("METRICS_URL", "")
REPORT_DIR = Path(os.environ.get("REPORT_DIR", Path(__file__).parent / "reports"))

bridge = AsyncioBridge()
_connection: Any = None
_node_numbers = itertools.count()
# Acknowledged publishes by subject, written at quit (published-<pid>.json in REPORT_DIR) so a
# count that differs from the stream's can be traced to the subjects where it differs.
_acked_by_subject: Counter[str] = Counter()
# Users stop publishing by themselves PUBLISH_SECONDS after the start, before locust's own
# --run-time ends the run: nothing is in flight when locust writes its final stats.
PUBLISH_SECONDS = float(os.environ.get("PUBLISH_SECONDS", "0"))
_publish_until = float("inf")


def _payloads() -> Any:
    from emulator.fleet import build_fleet
    from emulator.payload import PayloadFactory
    from emulator.scenario import parse_scenario

    s = parse_scenario({"name": "locust", "seed": 1, "duration": "1h", "fleet": {"nodes": 10_000}})
    fleet = build_fleet(s)
    return fleet, PayloadFactory(fleet, s.fleet.sizes.min)


FLEET, PAYLOADS = _payloads()


async def _connect(url: str) -> Any:
    import nats

    global _connection
    if _connection is None or _connection.is_closed:
        _connection = await nats.connect(url.split(","), name="locust-fleet", max_reconnect_attempts=-1)
    return _connection


async def _publish(url: str, subject: str, data: bytes) -> Any:
    nc = await _connect(url)
    return await nc.jetstream().publish(subject, data, timeout=PUBLISH_TIMEOUT)


class RegistrationNode(User):
    """One fleet node: publishes its registration record every 300 s / SPEEDUP."""

    wait_time = constant_pacing(300.0 / SPEEDUP)

    def on_start(self) -> None:
        runner = self.environment.runner
        worker = getattr(runner, "worker_index", 0) if isinstance(runner, WorkerRunner) else 0
        self.node = next(_node_numbers)
        self.slot = self.node % FLEET.total
        self.identity = f"locust{worker}-{self.node:07d}.{FLEET.data_centres[0]}.{FLEET.domain}"
        self.size = RECORD_SIZE or int(FLEET.size[self.slot])
        self.url = os.environ.get("SOURCE_URL") or self.host or "nats://127.0.0.1:4222"
        self.serial = 0
        self.booted = time.time()

    @task
    def publish_registration(self) -> None:
        now = time.time()
        if now >= _publish_until:
            raise StopUser()
        data = PAYLOADS.render(
            self.slot, self.size, False, int(now), int(now - self.booted), self.serial, self.identity
        )
        self.serial += 1
        subject = SUBJECT_PREFIX + self.identity
        start = time.perf_counter()
        exc: Exception | None = None
        interrupted: Interrupted | None = None
        try:
            bridge.call(_publish(self.url, subject, data), PUBLISH_TIMEOUT + 1)
        except Interrupted as stop:
            exc, interrupted = stop.error, stop
        except Exception as e:
            exc = e
        if exc is None:
            _acked_by_subject[subject] += 1
        self.environment.events.request.fire(
            request_type="JS",
            name="publish registration",
            response_time=(time.perf_counter() - start) * 1000,
            response_length=len(data),
            exception=exc,
            context={},
        )
        if interrupted is not None:
            raise interrupted


def _watch_replicator(environment: Environment, url: str, every: float = 2.0) -> None:
    """Report the replicator's copy rate and lag as locust stats, and keep them as CSV."""
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    with (REPORT_DIR / "replicator.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["unix_time", "copied", "received", "lag", "copy_rate"])
        last: tuple[float, float] | None = None
        # Bounded: the run's publishing time plus a minute, or an hour when none was given.
        for _ in range(int(((PUBLISH_SECONDS or 3600) + 60) / every)):
            try:
                m = scrape(url)
            except Exception as e:
                environment.events.request.fire(
                    request_type="REPLICATOR", name="scrape", response_time=0, response_length=0,
                    exception=e, context={},
                )  # fmt: skip
                gevent.sleep(every)
                continue
            now = time.time()
            rate = (m["copied"] - last[1]) / (now - last[0]) if last else 0.0
            last = (now, m["copied"])
            w.writerow([f"{now:.1f}", int(m["copied"]), int(m["received"]), int(m["lag"]), f"{rate:.1f}"])
            f.flush()
            for name, value in (("copy rate (msg/s)", rate), ("lag (messages)", m["lag"])):
                environment.events.request.fire(
                    request_type="REPLICATOR", name=name, response_time=value, response_length=0,
                    exception=None, context={},
                )  # fmt: skip
            gevent.sleep(every)


def _quit_when_users_stopped(environment: Environment) -> None:
    """End a local run as soon as every user has stopped by itself after PUBLISH_SECONDS, so
    locust never has to kill a user whose publish is in flight (--run-time is the backstop)."""
    gevent.sleep(max(0.0, _publish_until - time.time()))
    deadline = time.time() + PUBLISH_TIMEOUT + 300.0 / SPEEDUP + 30
    runner = environment.runner
    while runner is not None and runner.user_count > 0 and time.time() < deadline:
        gevent.sleep(0.2)
    if runner is not None:
        runner.quit()


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    global _publish_until
    if PUBLISH_SECONDS:
        _publish_until = time.time() + PUBLISH_SECONDS
        if isinstance(environment.runner, LocalRunner):
            gevent.spawn(_quit_when_users_stopped, environment)
    if METRICS_URL and not isinstance(environment.runner, WorkerRunner):
        gevent.spawn(_watch_replicator, environment, METRICS_URL)


@events.quit.add_listener
def _on_quit(**_: Any) -> None:
    # At the very end (locust fires `quitting` before a signal's stop ends the users), once per
    # process that published (a distributed run's master has nothing to write).
    if _acked_by_subject:
        REPORT_DIR.mkdir(parents=True, exist_ok=True)
        (REPORT_DIR / f"published-{os.getpid()}.json").write_text(json.dumps(_acked_by_subject))


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: Any) -> None:
    if _connection is not None and not isinstance(environment.runner, MasterRunner):
        try:
            bridge.call(_connection.drain(), 5)
        except Exception as e:  # closing must not hide the run's results
            print(f"closing NATS connection: {e}")
