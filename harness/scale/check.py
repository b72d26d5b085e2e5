"""The checker host of the EC2 scale test and of its rehearsal: the scenario runner's watching
and checking, on clusters and replicators that other hosts run.

It makes the streams the scenario's replicators advise into (and the fleet's streams and the
election bucket, as the runner does; whichever of it and the emulators comes first makes the
fleet's), samples the streams and the replicators' metrics every second, waits until the fleet
has published for the scenario's wall time and then gone quiet, waits for every copy and
advisory the ground truth expects, and writes `check.json` (each stream's observation beside its
truth, the samples) with the scenario file beside it. `make scale-report` turns them, with the
emulators' summaries, into the runner's report.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tenacity import Retrying, before_sleep_log, stop_after_delay, wait_fixed

from harness.scenario.runner import (
    Sampler,
    create_streams,
    hop_refs,
    observe,
    settle_for_check,
    streams_of,
)
from harness.scenario.spec import ScenarioSpec
from harness.scrape import scrape
from harness.streams import count_messages

log = logging.getLogger(__name__)

CHECK_FILE = "check.json"


def _retry(what: str, fn: Callable[[], object], limit_s: float) -> None:
    """Servers on other hosts come up in their own time (a JetStream cluster elects its meta
    leader after its routes connect): try until `limit_s`."""
    try:
        for attempt in Retrying(
            stop=stop_after_delay(limit_s),
            wait=wait_fixed(2),
            reraise=True,
            before_sleep=before_sleep_log(log, logging.INFO),
        ):
            with attempt:
                fn()
    except Exception as e:
        raise RuntimeError(f"{what}: still failing after {limit_s:.0f}s: {e!r}") from e


def _fleet_total(urls: dict[str, str], fed: list[tuple[str, str]]) -> int:
    return sum(asyncio.run(count_messages(urls[c], st)) for c, st in fed)


def wait_for_fleet(spec: ScenarioSpec, urls: dict[str, str], quiet_s: float, start_limit_s: float) -> float:
    """Wait until the fleet's streams have grown for the scenario's wall time from their first
    message and then held still for `quiet_s`; the seconds they grew for."""
    s = spec.scenario
    wall = s.duration / s.speedup
    fed = [(name, c.stream) for name, c in spec.clusters().items() if c.data_centres]
    t0 = time.monotonic()
    first: float | None = None
    last_growth, last_total = 0.0, -1
    while True:
        now = time.monotonic()
        try:
            total = _fleet_total(urls, fed)
        except Exception as e:  # a server restarting: the next sample tells
            log.info("counting the fleet's streams: %r", e)
            time.sleep(1)
            continue
        if total > 0 and first is None:
            first = now
            log.info("the fleet is publishing; the run takes %.0fs of wall time", wall)
        if total != last_total:
            last_total, last_growth = total, now
        if first is None and now - t0 > start_limit_s:
            raise RuntimeError(
                f"no message in the fleet's streams after {start_limit_s:.0f}s: are the emulator hosts "
                "running (journalctl -u sr-role on one of them)?"
            )
        if first is not None and now - first >= wall and now - last_growth >= quiet_s:
            log.info("the fleet published %d messages in %.0fs", total, last_growth - first)
            return last_growth - first
        time.sleep(1)


def run_check(
    spec: ScenarioSpec,
    urls: dict[str, str],
    metrics: dict[str, list[str]],
    out: Path,
    quiet_s: float = 15.0,
    start_limit_s: float = 1800.0,
) -> Path:
    """`urls`: cluster name -> its servers' URLs; `metrics`: replicator process name -> the
    /metrics URL of each of its instances. Returns the path of check.json."""
    clusters = spec.clusters()
    missing = sorted(set(clusters) - set(urls))
    if missing:
        raise ValueError(f"--cluster: no URLs for cluster {', '.join(missing)}; give NAME=URLS for each")
    absent = sorted({p.name for p in spec.processes()} - set(metrics))
    if absent:
        raise ValueError(f"--metrics: no URL for replicator {', '.join(absent)}; give NAME=URL for each")
    out.mkdir(parents=True, exist_ok=True)
    _retry("creating the scenario's streams", lambda: asyncio.run(create_streams(urls, spec)), start_limit_s)
    log.info("streams ready on %s", ", ".join(sorted(urls)))
    hops = [h for p in spec.processes() for h in hop_refs(spec, p, urls, metrics[p.name])]
    sampler = Sampler({f"{c}:{st}": (urls[c], st) for c, st in streams_of(spec)}, hops)
    sampler.start()
    try:
        publish_seconds = wait_for_fleet(spec, urls, quiet_s, start_limit_s)
        truths, cut = settle_for_check(spec, hops)
        time.sleep(2)  # anything late (a wrong advisory) arrives too
        finals = {h.label: scrape(h.metrics_url(), worker=h.hop.name) for h in hops}
        observed = observe(hops, truths, finals, sampler, cut)
    finally:
        sampler.stop()
    doc = {
        "scenario": spec.scenario.name,
        "advisories_until": cut,
        "publish_seconds": publish_seconds,
        "hops": [asdict(o) for o in observed],
        "rows": sampler.rows,
    }
    path = out / CHECK_FILE
    path.write_text(json.dumps(doc))
    if spec.path is not None:
        shutil.copyfile(spec.path, out / "scenario.yaml")
    log.info("wrote %s", path)
    return path
