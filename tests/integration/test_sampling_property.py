"""Property test through Spark: for generated messages (senders, gaps, sizes, force flags) and
generated batch sizes and bucket counts, the Spark sampling pipeline (nats-jetstream source ->
applyInPandasWithState -> foreachBatch) decides exactly what the plain reference decides:
the same copied sequences and the same advisories to the millisecond."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.js.api import StreamConfig

from harness.servers import NatsCluster, nats_cluster
from harness.streams import read_all
from replicator.options import ReaderOptions, SamplingOptions
from replicator.sampling.extract import SenderExtractor
from replicator.sampling.reference import reference
from replicator.sampling.rules import Message, SamplingParams
from replicator.spark.sampling import (
    KIND_ADVISORY,
    KIND_COPY,
    KIND_STATS,
    decided_per_bucket,
)
from tests.helpers import binary_pickled_as_bytes

pytestmark = pytest.mark.integration

INSPECT_MS, WARN_MS = 1000, 500
_names = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[NatsCluster]:
    with nats_cluster(1, "prop") as c:
        yield c


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from replicator.spark.session import build_session

    s = build_session("local[2]", "sampling-property")
    yield s
    s.stop()


async def publish_with_gaps(url: str, stream: str, events: list[tuple[int, int, int, bool]]) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"], allow_direct=True))
    for sender, gap_ms, size, force in events:
        await asyncio.sleep(gap_ms / 1000)
        doc: dict[str, Any] = {"force": force, "pad": "x" * size}
        if sender < 5:
            doc["sender"] = f"node{sender}"
        await js.publish(f"{stream.lower()}.msg", json.dumps(doc).encode())
    await nc.close()


def committed_clock(checkpoint: Path) -> int:
    """The event-time clock of the last committed batch (0 before the first)."""
    commits = [int(f.name) for f in (checkpoint / "commits").glob("*") if f.name.isdigit()]
    if not commits:
        return 0
    offset = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()[-1]
    return int(json.loads(offset)["clock"])


events = st.lists(
    st.tuples(
        st.integers(0, 5),  # sender (5: the payload has no sender field)
        st.sampled_from([0, 0, 5, 20, 60, 550, 1050]),  # ms since the previous message
        st.integers(100, 400),  # padding: size_trigger is 150
        st.booleans(),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(evts=events, batch=st.integers(1, 12), buckets=st.integers(1, 4))
def test_spark_pipeline_decides_exactly_like_the_reference(
    server: NatsCluster,
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    evts: Any,
    batch: int,
    buckets: int,
) -> None:

    stream = f"PROP{next(_names)}"
    asyncio.run(publish_with_gaps(server.url, stream, evts))
    p = SamplingParams(INSPECT_MS, WARN_MS, 150, stream, "prop", "sender", "adv.%s.%v")
    extractor = SenderExtractor(field="sender", force_field="force")
    opts = ReaderOptions(
        url=server.url, stream=stream, max_messages_per_batch=batch,
        sampling=SamplingOptions(inspect_field="sender", inspect_force_field="force",
                                 sampling_buckets=buckets, clock_interval_ms=200),
    ).to_spark()  # fmt: skip
    batches: list[tuple[int, list[Any]]] = []
    checkpoint = tmp_path_factory.mktemp("ckpt")
    query = (
        decided_per_bucket(spark.readStream.format("nats-jetstream").options(**opts).load(), p)
        .writeStream.foreachBatch(lambda df, bid: batches.append((bid, df.select("kind", "seq", "ts_ms", "data", "received", "received_bytes").collect())))
        .option("checkpointLocation", str(checkpoint))
        .start()
    )  # fmt: skip
    stored = asyncio.run(read_all(server.url, stream))
    # Once caught up the source's clock follows the wall clock, so the query never runs out
    # of data (processAllAvailable would not return): wait until a committed batch's clock is
    # past every sender's expiry.
    everyone_expired = stored[-1].ts_ns // 1_000_000 + INSPECT_MS
    try:
        deadline = time.monotonic() + 120
        while committed_clock(checkpoint) < everyone_expired and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.1)
    finally:
        query.stop()
    rows = [r for _, batch in sorted(batches, key=lambda b: b[0]) for r in batch]
    msgs = []
    for m in stored:
        sender, force = extractor.extract(m.subject, m.headers, m.data)
        msgs.append(Message(m.seq, sender, m.ts_ns // 1_000_000, len(m.data), force))
    want_copied, want_advs = reference(msgs, committed_clock(checkpoint), p)
    got_copied = sorted(r.seq for r in rows if r.kind == KIND_COPY)
    got_advs = sorted(
        (json.loads(r.data)["value"], json.loads(r.data)["event"], r.ts_ms)
        for r in rows
        if r.kind == KIND_ADVISORY
    )
    # The buckets' tables went to the workers through our pickler (replicator.spark.binary_pickler).
    assert binary_pickled_as_bytes(spark)
    assert got_copied == want_copied
    assert got_advs == sorted((a.sender, a.event, a.event_ms) for a in want_advs)
    # Each message decided once, in the batch that read it: every batch's buckets decided exactly
    # the messages after the last batch's last one up to its own last (the sink handles up to it).
    handled = 0
    for _, batch in sorted(batches, key=lambda b: b[0]):
        stats = [r for r in batch if r.kind == KIND_STATS]
        last = max(r.seq for r in stats)
        if last < 0:
            assert sum(r.received for r in stats) == 0
            continue
        read = [m for m in stored if handled < m.seq <= last]
        assert sum(r.received for r in stats) == len(read)
        assert sum(r.received_bytes for r in stats) == sum(len(m.data) for m in read)
        handled = last
    assert handled == stored[-1].seq
    # The rest: advisories, and one row a bucket and batch with its sender counts.
    assert {r.kind for r in rows} <= {KIND_COPY, KIND_ADVISORY, KIND_STATS}
