"""Where a new copy with `start_time` starts: the first message stored at or after that time,
as the stream holds it, whichever server answers."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from helpers import create_stream, publish_raw, run
from nats_servers import NatsCluster

from replicator.nats import jetstream
from replicator.nats.connect import open_connection
from replicator.options import ReaderOptions
from replicator.spark.datasource import choose_initial_offset

pytestmark = pytest.mark.integration


async def _start(url: str, stream: str, when: datetime) -> int:
    nc = await open_connection(url)
    try:
        return int(
            (await choose_initial_offset(nc, ReaderOptions(url=url, stream=stream, start_time=when)))["seq"]
        )
    finally:
        await nc.close()


@pytest.mark.parametrize("replica_behind", [False, True], ids=["current", "replica-behind"])
def test_a_copy_from_a_start_time_starts_at_the_first_message_stored_since(
    nats_server: NatsCluster, monkeypatch: pytest.MonkeyPatch, replica_behind: bool
) -> None:
    """A replica behind answers a direct get for the start time with "none" when it does not
    hold the messages stored since yet: the copy started after the stream's last message, and
    those were never copied. Now "none" stands only where the last message is older."""
    url = nats_server.url
    run(create_stream(url, "S", ["s.>"]))
    run(publish_raw(url, [("s.old", b"x", [])] * 5))
    time.sleep(0.05)
    cut = datetime.now(UTC)
    time.sleep(0.05)
    run(publish_raw(url, [("s.new", b"y", [])] * 3))  # 6, 7 and 8
    if replica_behind:
        asked = jetstream.sequence_at_time

        async def behind(nc: object, stream: str, when: datetime, direct: bool) -> int | None:
            return None if direct else await asked(nc, stream, when, direct)  # type: ignore[arg-type]

        monkeypatch.setattr(jetstream, "sequence_at_time", behind)
    assert run(_start(url, "S", cut)) == 6
    # Nothing since: the copy starts after the last message, whoever answered.
    assert run(_start(url, "S", datetime.now(UTC) + timedelta(seconds=1))) == 9
