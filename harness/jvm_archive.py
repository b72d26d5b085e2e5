"""`python -m harness jvm-archive`: build the Spark driver's class-data-sharing archive.

Runs a short embedded replication (a full copy and a sampled copy, so the streaming, Arrow and
state-store classes are all loaded) between two local nats-servers, then lets the JVM write
every class it loaded to the archive that later starts use (see `replicator.spark.jvm`).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from pathlib import Path

from harness.localnats import local_cluster
from replicator.config import parse_config
from replicator.runner import Runner
from replicator.spark.jvm import archive_path, finish_archive

log = logging.getLogger(__name__)


def build_class_archive(timeout: float = 300.0) -> Path:
    from harness.demo import STREAM, advisory_stream, fill

    target = archive_path()
    if target is None:
        raise RuntimeError("no java found: set JAVA_HOME or put java (17+) on PATH")
    work = Path(tempfile.mkdtemp(prefix="sr-jvm-archive-"))
    with local_cluster(1, "archive-src") as source, local_cluster(1, "archive-dst") as dest:
        published, _ = fill(source.url, nodes=500, per_node=4, size=1024)
        asyncio.run(advisory_stream(source.url))
        common = {"stream": STREAM, "source_url": source.url, "target_url": dest.url}
        cfg = parse_config(
            {
                "name": "jvm-archive",
                "state_store": str(work / "state"),
                "streams": [
                    {**common, "name": "copy", "target_stream": "COPY", "target_subject_prefix": "copy"},
                    {**common, "name": "sampled", "target_stream": "SAMPLED", "target_subject_prefix": "s",
                     "inspect_field": "sender", "inspect_duration": "1h",
                     "advisory": {"subject": "choria.advisories.%s.%v", "reliable": True}},
                ],
            }
        )  # fmt: skip
        runner = Runner(cfg, list(cfg.streams), "local[*]", create_class_archive=True)
        started = time.monotonic()

        def caught_up(r: Runner) -> None:
            done = all(
                rep.sink is not None and rep.sink.totals.received >= published and rep.lag == 0
                for rep in r.replications
            )
            if done or time.monotonic() - started > timeout:
                r.request_stop()

        runner.run(on_progress=caught_up)
    archive = finish_archive()
    if archive is None:
        raise RuntimeError(f"the JVM did not write its class archive to {target.parent}")
    return archive
