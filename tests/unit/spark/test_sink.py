"""The ordered sink's bookkeeping, without a server (its publishing is integration's)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from replicator.aio import LoopThread
from replicator.headers import MSG_ID_HEADER
from replicator.nats.jetstream import TargetLimits
from replicator.nats.publisher import PublishError, PublishOutcome, Refusal
from replicator.nats.readers import RawMessage
from replicator.spark.inflight import InflightRecord
from replicator.spark.rows import to_record_batch
from replicator.spark.sink import BatchCopies, OrderedSink, SinkClosed, SinkSettings
from replicator.subjects import subjects_matcher


def test_a_publish_still_running_past_a_wait_is_still_waited_for() -> None:
    """A takeover's catch-up gives up waiting for the batch in flight after the ack timeout; the
    next batch must still wait for it, or its in-flight record would be replaced while the
    batch may yet land (found by review, issue 28)."""
    loop = LoopThread("test-sink")
    try:
        sink = OrderedSink(SinkSettings("nats://127.0.0.1:1", "T", "S", "dc1", "cfg", "dc1.cfg.S.1"), loop)
        running: concurrent.futures.Future[None] = concurrent.futures.Future()
        sink._pending = running
        with pytest.raises(TimeoutError):
            sink.wait_published(0.01)
        assert sink._pending is running
        running.set_exception(RuntimeError("refused"))
        with pytest.raises(RuntimeError, match="refused"):
            sink.wait_published(1)
        assert sink._pending is None
        # Raised to every later caller (the query's next batch, the live copies) until catch_up
        # has published it again: none of them may publish past it.
        with pytest.raises(RuntimeError, match="refused"):
            sink.wait_published(1)
        assert isinstance(sink.publish_failed(), RuntimeError)
        sink.failure_settled()
        sink.wait_published(1)
        assert sink.publish_failed() is None
    finally:
        loop.stop()


def test_a_close_while_a_batch_waits_for_the_last_ones_acks_lets_no_batch_start_after_it() -> None:
    """A stop closes the sink, then writes how far the target acknowledged (the live mark). A
    copier waiting for its last batch's acks (the copies ahead, on a slow target) must not send
    its next batch once they come, nor reopen the connection: those copies would be past the
    mark (found by a cold review: the copier reconnected after the close)."""
    loop = LoopThread("test-sink")
    try:
        sink = OrderedSink(SinkSettings("nats://127.0.0.1:1", "T", "S", "dc1", "cfg", "dc1.cfg.S.1"), loop)
        sink.inflight = InflightRecord(Path("/nonexistent/inflight"))  # never written: nothing starts
        last: concurrent.futures.Future[None] = concurrent.futures.Future()
        sink._pending = last
        msgs = [RawMessage(seq, "s.a", time.time_ns(), None, b"{}") for seq in (1, 2, 3)]
        raised: list[BaseException] = []

        def copier() -> None:
            try:
                sink.publish_rows(pa.Table.from_batches([to_record_batch("S", msgs)]), time.monotonic())
            except BaseException as e:
                raised.append(e)

        thread = threading.Thread(target=copier)
        thread.start()
        time.sleep(0.2)  # the copier holds `publishing`, waiting for the last batch's acks
        closing = threading.Thread(target=sink.close, args=(5.0,))
        closing.start()
        deadline = time.monotonic() + 5
        while not sink._closed and time.monotonic() < deadline:
            time.sleep(0.01)
        last.set_result(None)  # the acks come while the close waits
        thread.join(5)
        closing.join(5)
        assert not thread.is_alive() and not closing.is_alive()
        assert len(raised) == 1 and isinstance(raised[0], SinkClosed), raised
        assert sink._pending is None
        with pytest.raises(SinkClosed):
            loop.run(sink.connection(), 5)
    finally:
        loop.stop()


def test_the_first_batch_on_a_target_not_yet_looked_at_is_recorded_as_possibly_leaving_gaps(
    tmp_path: Path,
) -> None:
    """Until the sink has read the target's limits it cannot know the target is a single server,
    where a chained copy after a refused one is never stored. A clustered one chains by sequence,
    and a foreign message can line a later copy up after a refused one: should the process die
    before the acks say so, only a record that says "gaps possible" makes the next start look for
    the gap (found by reading the code: the first batch after a start was recorded as chained)."""
    loop = LoopThread("test-sink")
    try:
        sink = OrderedSink(
            SinkSettings("nats://127.0.0.1:1", "T", "S", "dc1", "cfg", "dc1.cfg.S.1", ack_timeout=0.1),
            loop,
            inflight=InflightRecord(tmp_path / "inflight"),
        )
        msgs = [RawMessage(seq, "s.a", 1_700_000_000_000_000_000, None, b"{}") for seq in (1, 2, 3)]
        table = pa.Table.from_batches([to_record_batch("S", msgs)])
        sink.small_batches = lambda batch_id, above: table
        sink(None, 0)
        left = InflightRecord(tmp_path / "inflight").read()
        assert left is not None and (left.first_seq, left.last_seq) == (1, 3)
        assert left.unchained, "a first batch on a target of unknown replicas was recorded as gapless"
    finally:
        if sink._pending is not None:
            sink._pending.cancel()
        loop.stop()


def _copying_live_to_nowhere(
    tmp_path: Path, cls: type[OrderedSink] = OrderedSink
) -> tuple[LoopThread, OrderedSink]:
    """A sink copying live (reads above the floor), with an in-flight record, whose target
    cannot be reached: its publishes stay pending until cancelled."""
    loop = LoopThread("test-sink")
    sink = cls(
        SinkSettings("nats://127.0.0.1:1", "T", "S", "dc1", "cfg", "dc1.cfg.S.1", ack_timeout=0.1),
        loop,
        inflight=InflightRecord(tmp_path / "inflight"),
    )
    sink.reads_above_floor = True
    return loop, sink


def test_copied_live_a_batch_reads_above_the_publish_in_hand_and_fails_if_that_fails(tmp_path: Path) -> None:
    """Copied live, a batch of the query leaves out what is being published (it was read and
    dropped, and the driver's reads slowed the live copies). Safe only because the batch waits
    for that publish and fails with it: here the live publish of 1-3 cannot reach the target,
    so the batch that did not read 1-3 is never committed, and the record keeps 1-3 for catch_up."""
    loop, sink = _copying_live_to_nowhere(tmp_path)
    try:

        def table_of(seqs: range) -> pa.Table:
            msgs = [RawMessage(q, "s.a", 1_700_000_000_000_000_000, None, b"{}") for q in seqs]
            return pa.Table.from_batches([to_record_batch("S", msgs)])

        sink.publish_rows(table_of(range(1, 4)), 0.0)  # the live copies' publish
        asked: list[int] = []

        def read(batch_id: int, above: int) -> pa.Table:
            asked.append(above)
            return table_of(range(above + 1, 6))

        sink.small_batches = read
        pending = sink._pending
        assert pending is not None
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            batch = pool.submit(sink, None, 0)
            try:
                with pytest.raises(concurrent.futures.TimeoutError):
                    batch.result(0.5)  # it waits for the live publish of 1-3 (its target cannot be reached)
                assert asked == [3], "the batch read what the live publish in hand holds again"
            finally:
                pending.cancel()  # that publish fails
            with pytest.raises(concurrent.futures.CancelledError):
                batch.result(5)  # and so does the batch: Spark does not commit it
        left = InflightRecord(tmp_path / "inflight").read()
        assert left is not None and (left.first_seq, left.last_seq) == (1, 3)
        assert sink.floor == 0
    finally:
        if sink._pending is not None:
            sink._pending.cancel()
        loop.stop()


class _BlockedSeen:
    """The sink's `_pending_lock`, noting when the thread named "batch" finds it held."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.blocked = inner, threading.Event()

    def __enter__(self) -> Any:
        if threading.current_thread().name == "batch" and getattr(self.inner, "locked", lambda: False)():
            self.blocked.set()
        return self.inner.__enter__()

    def __exit__(self, *exc: object) -> Any:
        return self.inner.__exit__(*exc)


class _WaiterPreempted(OrderedSink):
    """A sink whose waiter on the thread named "waiter" is preempted right after it read the
    publish in hand a second time (to forget it), while `preempt` runs on another thread until
    it ends or waits for the waiter's lock (no fixed time: a loaded machine cannot hide the race)."""

    preempt: threading.Thread | None = None
    _waiter_reads = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending_lock = _BlockedSeen(self._pending_lock)  # type: ignore[assignment]

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name == "_pending" and threading.current_thread().name == "waiter":
            reads = object.__getattribute__(self, "_waiter_reads") + 1
            object.__setattr__(self, "_waiter_reads", reads)
            other = object.__getattribute__(self, "preempt")
            blocked = object.__getattribute__(self, "_pending_lock").blocked
            if reads == 2 and other is not None:
                other.start()
                deadline = time.monotonic() + 30
                while other.is_alive() and not blocked.is_set() and time.monotonic() < deadline:
                    other.join(0.01)
        return value


def test_a_wait_outside_the_publishing_lock_never_forgets_the_next_batchs_publish(tmp_path: Path) -> None:
    """The live copies wait for the last publish's acks without the publishing lock. A batch of
    the query may submit its own publish between that wait's check and its forgetting the one it
    waited for: were the batch's forgotten, the next batch would not wait for it and would be
    committed while it may yet fail (found by review of 405e55c)."""
    loop, sink = _copying_live_to_nowhere(tmp_path, _WaiterPreempted)
    assert isinstance(sink, _WaiterPreempted)
    try:
        acknowledged: concurrent.futures.Future[None] = concurrent.futures.Future()
        acknowledged.set_result(None)
        sink._pending = acknowledged  # the live copies' publish, done
        msgs = [RawMessage(q, "s.a", 1_700_000_000_000_000_000, None, b"{}") for q in (1, 2)]
        sink.small_batches = lambda batch_id, above: pa.Table.from_batches([to_record_batch("S", msgs)])
        sink.preempt = threading.Thread(target=sink, args=(None, 0), name="batch")  # publishes 1-2
        waiter = threading.Thread(target=sink.wait_published, args=(1,), name="waiter")
        waiter.start()
        waiter.join(5)
        sink.preempt.join(5)
        assert not waiter.is_alive() and not sink.preempt.is_alive()
        assert sink._pending is not None and sink._pending is not acknowledged, (
            "the batch's publish was forgotten"
        )
        assert sink.still_publishing()
    finally:
        if sink._pending is not None:
            sink._pending.cancel()
        loop.stop()


SETTINGS = SinkSettings("nats://127.0.0.1:1", "T", "S", "dc1", "cfg", "dc1.cfg.S.1", subject_prefix="c")


def copies_of(seqs: list[int], sizes: list[int] | None = None, subjects: tuple[str, ...] = ()) -> BatchCopies:
    sizes = sizes or [10] * len(seqs)
    msgs = [
        RawMessage(seq, "s.a", 1_700_000_000_000_000_000, None, b"x" * n)
        for seq, n in zip(seqs, sizes, strict=True)
    ]
    table = pa.Table.from_batches([to_record_batch("S", msgs)])
    limits = TargetLimits(max_msg_size=None, max_payload=1024, subjects=subjects)
    return BatchCopies.of(table, SETTINGS, limits, subjects_matcher(subjects) if subjects else None)


def header_lines(lines: bytes) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in lines.decode().split("\r\n") if ": " in line)


def test_each_chained_copy_expects_the_one_before_it_and_the_first_expects_the_targets_last() -> None:
    copies = copies_of([7, 8, 9])
    sent = list(copies.messages(0, ("dc1.cfg.S.1.6", 40), by_sequence=False))
    assert [subject for subject, _, _ in sent] == ["c.s.a"] * 3  # the prefix applied
    ids = [header_lines(lines)[MSG_ID_HEADER] for _, _, lines in sent]
    expects = [header_lines(lines)["Nats-Expected-Last-Msg-Id"] for _, _, lines in sent]
    assert expects == ["dc1.cfg.S.1.6", *ids[:-1]]
    assert copies.last_id == ids[-1] and copies.held is None


def test_on_a_clustered_target_each_copy_expects_the_target_sequence_before_it() -> None:
    sent = list(copies_of([7, 8, 9]).messages(1, ("x", 40), by_sequence=True))
    assert [header_lines(lines)["Nats-Expected-Last-Sequence"] for _, _, lines in sent] == ["40", "41"]


def test_unchained_copies_expect_nothing() -> None:
    for _, _, lines in copies_of([1, 2]).messages(0, None, by_sequence=False):
        assert not any(k.startswith("Nats-Expected") for k in header_lines(lines))


def test_a_copy_the_target_would_refuse_whatever_the_order_holds_back_it_and_every_later_one() -> None:
    copies = copies_of([1, 2, 3], sizes=[10, 2000, 10])
    sent = list(copies.messages(0, None, by_sequence=False))
    assert len(sent) == 1
    assert (
        copies.held is not None and "source sequence 2" in copies.held and "raise that limit" in copies.held
    )

    off_subject = copies_of([1, 2], subjects=("other.>",))
    assert list(off_subject.messages(0, None, by_sequence=False)) == []
    assert off_subject.held is not None and "does not hold" in off_subject.held


def test_the_first_reason_a_batch_stopped_is_the_one_reported() -> None:
    copies = copies_of([1])
    copies.stop("refused by the target")
    copies.stop("the lease ended")
    assert copies.held == "refused by the target"


def test_rows_at_or_below_the_floor_are_passed_over() -> None:
    copies = copies_of([3, 4, 5, 6])
    assert copies.first_above(4, 0) == 2
    assert copies.first_above(10, 0) == 4  # none above: past the end
    assert copies.first_above(0, 1) == 1


def test_copied_live_what_the_other_publisher_handled_after_this_read_is_not_counted_again(
    tmp_path: Path,
) -> None:
    """Copied live, a batch may hold messages that the live copies published after the batch
    was read (or the other way round). Whoever handled them counted them: the second counts
    only what it publishes, so `received` counts each message once and `skipped` stays 0."""
    loop, sink = _copying_live_to_nowhere(tmp_path)
    try:
        msgs = [RawMessage(q, "s.a", 1_700_000_000_000_000_000, None, b"{}") for q in range(1, 6)]
        read_before = pa.Table.from_batches([to_record_batch("S", msgs)])  # 1-5, read before 1-3 landed
        sink.handled_up_to(3)  # the live copies' publish of 1-3 landed (and was counted there)
        result = sink.publish_rows(read_before, 0.0)
        assert (result.received, result.copied, result.last_seq) == (2, 2, 5)
        left = InflightRecord(tmp_path / "inflight").read()
        assert left is not None and (left.first_seq, left.last_seq) == (4, 5)
    finally:
        if sink._pending is not None:
            sink._pending.cancel()  # its target cannot be reached
        loop.stop()


def test_the_last_copy_known_is_none_once_the_floor_covers_copies_not_noted() -> None:
    """The live mark names the last copy known stored, which a start looks for in the target:
    it must have been stored after every copy the floor covers. Copies found in the target
    (a catch-up, a gap fill's range) move the floor without saying where they are: until a
    copy stored later is noted, no copy is known and no mark is written (found by review)."""
    loop = LoopThread("test-sink")
    try:
        sink = OrderedSink(SinkSettings("nats://127.0.0.1:1", "T", "S", "dc1", "cfg", "dc1.cfg.S.1"), loop)
        assert sink.known_copy is None
        sink._note_copy(100, 1_000)
        sink.handled_up_to(100, copies_noted=True)
        assert sink.known_copy == (100, 1_000)
        sink.handled_up_to(100)  # not past the floor: nothing covered
        assert sink.known_copy == (100, 1_000)
        sink.handled_up_to(150)  # copies 101-150 found in the target, where is not known
        assert sink.floor == 150 and sink.known_copy is None
        sink.handled_up_to(160, copies_noted=True)  # skipped rows, say: still not known
        assert sink.known_copy is None
        sink._note_copy(151, 1_060)  # stored now, after them
        assert sink.known_copy == (151, 1_060)
        sink._note_copy(120, 1_070)  # a gap's copy published again: stored last
        assert sink.known_copy == (120, 1_070)
        sink._note_copy(152, 1_065)  # stored before the last known one
        assert sink.known_copy == (120, 1_070)
    finally:
        loop.stop()


@pytest.mark.parametrize(
    ("outcome", "chain", "known"),
    [
        # Every copy acked: the last one stored now, by its ack.
        ({"published": 3, "stored": 3, "top_index": 2, "top_seq": 42}, None, (9, 42)),
        # The last acked a duplicate (stored before): the one before it, which was stored after it.
        ({"published": 3, "stored": 3, "duplicates": 1, "top_index": 1, "top_seq": 41}, None, (8, 41)),
        # Sparse acks whose last was a duplicate: the copies it vouched for may be later ones.
        (
            {"published": 3, "stored": 3, "duplicates": 1, "top_index": 0, "top_seq": 40, "exact": False},
            ("x", 39),
            None,
        ),
        # Every ack a duplicate (a publish again after lost acks): none stored now.
        ({"published": 3, "stored": 3, "duplicates": 3}, None, None),
        # A fast batch whose final ack names the chain's place for its last copy.
        ({"published": 3, "stored": 3, "last_seq": 42}, ("x", 39), (9, 42)),
        # A fast batch cut short after two, its final ack where the chain puts the second.
        ({"published": 3, "stored": 2, "last_seq": 41, "failures": [Refusal(2, "gap")]}, ("x", 39), (8, 41)),
    ],
    ids=["acked", "last-duplicate", "sparse-duplicate", "all-duplicates", "fast", "fast-cut-short"],
)
def test_a_settled_attempt_notes_a_copy_stored_after_every_one_it_covers(
    outcome: dict[str, Any], chain: tuple[str, int] | None, known: tuple[int, int] | None
) -> None:
    """The floor moves past the copies the acks say were stored; the last copy known (the live
    mark's) must be one stored after all of them, or none is known."""
    loop = LoopThread("test-sink")
    try:
        sink = OrderedSink(SinkSettings("nats://127.0.0.1:1", "T", "S", "dc1", "cfg", "dc1.cfg.S.1"), loop)
        copies = copies_of([7, 8, 9])
        done = PublishOutcome(**outcome)
        # A refused copy fails the attempt after the floor moved past the stored ones.
        with contextlib.suppress(PublishError):
            loop.run(sink._settle(None, None, copies, done, 0, chain, False), 5)  # type: ignore[arg-type]
        assert sink.floor == 7 + done.stored - 1
        assert sink.known_copy == known
    finally:
        loop.stop()
