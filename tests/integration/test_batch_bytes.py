"""A copy batch of large registrations stays within `batch_max_bytes`: its rows pass through
the driver on their way to the target (50,000 rows of 9 KB, 450 MB, were lost there and failed
again on every retry). The planner asks a real server how large the stream's messages are."""

from __future__ import annotations

import pytest
from helpers import create_stream, publish, run
from nats_servers import NatsCluster

from replicator.options import ReaderOptions, SamplingOptions
from replicator.spark.datasource import NatsJetStreamReader

pytestmark = pytest.mark.integration


def _planned_rows(url: str, rows: int, **options: object) -> int:
    reader = NatsJetStreamReader(
        ReaderOptions(
            url=url, stream="BIG", max_messages_per_batch=rows, first_batch_messages=rows, **options
        )  # type: ignore[arg-type]
    )
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        return int(end["seq"]) - int(start["seq"])
    finally:
        reader.stop()


def test_a_copy_batch_of_large_messages_is_capped_by_bytes_and_small_ones_by_rows(
    nats_server: NatsCluster,
) -> None:
    url = nats_server.url
    run(create_stream(url, "BIG", ["big.>"]))
    run(publish(url, [(f"big.{i}", b'{"sender":"n%d"}' % i + b"x" * 8000, None) for i in range(3000)]))
    one_mib = 1 << 20
    # ~8 KB a message: 1 MiB holds ~130 of them, whatever the row limit says.
    assert 100 <= _planned_rows(url, 10_000, max_bytes_per_batch=one_mib) <= 135
    # The default budget (64 MiB) leaves these 3,000 messages (24 MB) to the row limit.
    assert _planned_rows(url, 10_000) == 3000
    assert _planned_rows(url, 1_000) == 1000
    # Sampled rows carry no payloads (the driver reads its copies back a chunk at a time), and
    # larger batches spread each batch's rewrite of the senders' state: the row limit alone.
    sampling = SamplingOptions(inspect_field="sender")
    assert _planned_rows(url, 2_500, max_bytes_per_batch=one_mib, sampling=sampling) == 2_500
