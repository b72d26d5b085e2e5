"""`order: subject`: Spark's tasks publish a copy in subject lanes. Every message is copied once,
each subject's copies stay in source order, and neither a kill -9 mid-copy nor a refused copy
published again long after loses, doubles or reorders anything."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import nats
import pytest
from helpers import (
    SLOW_S,
    create_stream,
    publish,
    registration,
    run,
    start_replicator,
    wait_for,
    wait_handled,
    write_config,
)

from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.wire import first_value

pytestmark = pytest.mark.integration

SUBJECTS = 13


def _lanes_config(src: str, dst: str, tmp_path: Path, lanes: int) -> Path:
    stream = {
        "stream": "ORDERS",
        "source_url": src,
        "target_url": dst,
        "order": "subject",
        "lanes": lanes,
        "batch_max_messages": 3000,
    }
    return write_config(tmp_path / "sr.yaml", "dc1", [stream])


def _copies_by_subject(src: str, dst: str) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Source sequences per subject: in the source, and as the target's copies hold them."""
    want: dict[str, list[int]] = defaultdict(list)
    for m in run(read_all(src, "ORDERS")):
        want[m.subject].append(m.seq)
    got: dict[str, list[int]] = defaultdict(list)
    for m in run(read_all(dst, "ORDERS")):
        mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
        assert mark is not None, "a copy without its Choria-SR-Source header"
        got[m.subject].append(mark.sequence)
    return dict(want), dict(got)


def test_lanes_copy_every_message_once_in_subject_order_across_a_kill_9(
    source_server, nats_server, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "ORDERS", ["orders.>"]))
    run(publish(src, [(f"orders.{i % SUBJECTS}", registration(i), None) for i in range(30_000)]))
    cfg = _lanes_config(src, dst, tmp_path, lanes=4)
    rep = start_replicator(cfg)
    wait_for(lambda: run(count(dst, "ORDERS")) >= 8_000, SLOW_S, "lanes copying", rep)
    rep.kill9()
    run(publish(src, [(f"orders.{i % SUBJECTS}", registration(i), None) for i in range(30_000, 35_000)]))
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "ORDERS")) >= 35_000, SLOW_S, "catch-up after restart", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    want, got = _copies_by_subject(src, dst)
    assert sorted(got) == sorted(want)
    for subject, seqs in want.items():
        assert got[subject] == seqs, f"{subject}: copies missing, doubled or out of order"
    assert "order: subject resumes from its checkpoint" in rep.output()
    # The lanes really ran side by side: across subjects the target is not in source order.
    everything = [
        parse_source_header(first_value(m.headers, SOURCE_HEADER)) for m in run(read_all(dst, "ORDERS"))
    ]
    seqs = [m.sequence for m in everything if m is not None]
    assert seqs != sorted(seqs)


def test_a_refused_copy_is_not_overtaken_and_its_batch_published_again_late_doubles_nothing(
    source_server, nats_server, tmp_path: Path
) -> None:
    """One copy refused (too big for the target) for longer than the target's duplicate window
    (1 s), with later messages of its subject in the same batch: none of them lands before it,
    and the batch, published again and again from the checkpoint, stores no copy twice. Found
    by the fault campaign (45 doubled); before the fix the later copies of the refused one's
    subject landed first, and each replay stored the other lanes' copies again."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "ORDERS", ["orders.>"]))
    run(create_stream(dst, "ORDERS", ["orders.>"], max_msg_size=4000, duplicate_window=1.0))
    items = [(f"orders.{i % SUBJECTS}", registration(i, 600), None) for i in range(2_000)]
    items[1_500] = (items[1_500][0], registration(1_500, 6_000), None)  # refused until the limit is raised
    run(publish(src, items))
    rep = start_replicator(_lanes_config(src, dst, tmp_path, lanes=4))
    try:
        wait_for(lambda: "refused source sequence 1501" in rep.output(10**9), SLOW_S, "the refusal", rep)
        time.sleep(8)  # published again from the checkpoint, each time after the duplicate window

        async def raise_limit() -> None:
            nc = await nats.connect(dst)
            try:
                info = await nc.jetstream().stream_info("ORDERS")
                info.config.max_msg_size = -1
                await nc.jetstream().update_stream(info.config)
            finally:
                await nc.close()

        run(raise_limit())
        wait_for(lambda: run(count(dst, "ORDERS")) >= len(items), SLOW_S, "every message copied", rep)
        wait_handled(rep, src, "ORDERS")  # anything doubled has landed too
    finally:
        assert rep.stop() == 0, rep.output()
    want, got = _copies_by_subject(src, dst)
    assert got == want, {s: (len(want[s]), len(got.get(s, []))) for s in want if got.get(s) != want[s]}
