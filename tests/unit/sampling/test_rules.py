"""Sampling decisions and the advisory state machine: hand-checked cases, and a property test
that the bucketed, batched, serialised engine equals the plain reference."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.sampling import rules, state
from replicator.sampling.extract import bucket_of
from replicator.sampling.reference import advisory_key, reference
from replicator.sampling.rules import (
    PROTOCOL,
    Advisory,
    Event,
    Message,
    SamplingParams,
    SenderTable,
    copy_interval_ms,
    ksuid,
    splay,
)

S = 1000
P = SamplingParams(inspect_ms=3600 * S, warn_ms=1800 * S, size_trigger=500, stream="REG",
                   replicator="dc1", inspect_label="sender", advisory_subject="adv.%s.%v")  # fmt: skip


def run(msgs: list[Message], clock: int, p: SamplingParams = P, table: SenderTable | None = None):
    t = table if table is not None else SenderTable()
    copies, advs = t.process(msgs, clock, p)
    return (
        [m.seq for m, c in zip(msgs, copies, strict=True) if c],
        [(a.event, a.sender, a.event_ms // S) for a in advs],
        t,
    )


def test_a_steady_sender_is_copied_when_new_then_once_per_interval() -> None:
    msgs = [Message(i, "n1", i * 300 * S, 1000) for i in range(30)]  # every 300 s for 2.5 h
    copied, advs, _ = run(msgs, 29 * 300 * S)
    gap = copy_interval_ms(P, "n1") / S
    assert 3240 <= gap <= 3600  # inspect_duration less up to 10 % splay
    expected = [0]
    for m in msgs[1:]:
        if m.ts_ms - msgs[expected[-1]].ts_ms >= gap * S:
            expected.append(m.seq)
    assert copied == expected and len(copied) == 3  # 12x fewer than published
    assert advs == [("new", "n1", 0)]


@given(st.text(min_size=1, max_size=30))
def test_a_copy_is_due_exactly_once_the_senders_interval_has_passed(sender):
    # SenderTable.process skips the sender's hash below 0.9 x inspect; its decision must not change.
    due = math.ceil(copy_interval_ms(P, sender))
    for since_copy, copied_again in ((due - 1, False), (due, True)):
        copied, _, _ = run([Message(0, sender, 0, 1000), Message(1, sender, since_copy, 1000)], since_copy)
        assert copied == ([0, 1] if copied_again else [0])


def test_the_shortcut_holds_at_the_largest_splay(monkeypatch) -> None:
    # A hash of 2**64 - 1 gives exactly 1.0 in floating point: the interval is then 0.9 x inspect,
    # the shortcut's own bound.
    monkeypatch.setattr(rules, "splay", lambda sender: 1.0)
    for inspect_ms in (10, 3_600_000, 3_600_001, 10**12 + 7):
        p = dataclasses.replace(P, inspect_ms=inspect_ms, warn_ms=10**15)
        due = math.ceil(copy_interval_ms(p, "n1"))
        assert due == math.ceil(inspect_ms * 0.9)
        for since_copy, copied_again in ((due - 1, False), (due, True)):
            copied, _, _ = run([Message(0, "n1", 0, 1000), Message(1, "n1", since_copy, 1000)], since_copy, p)
            assert copied == ([0, 1] if copied_again else [0])


def test_size_change_of_size_trigger_bytes_forces_a_copy_smaller_does_not() -> None:
    msgs = [Message(0, "n1", 0, 1000), Message(1, "n1", 300 * S, 1499), Message(2, "n1", 600 * S, 1999),
            Message(3, "n1", 900 * S, 1499)]  # fmt: skip
    copied, _, _ = run(msgs, 900 * S)
    assert copied == [0, 2, 3]  # +499 no, +500 yes, -500 yes


def test_force_field_true_forces_a_copy() -> None:
    msgs = [
        Message(0, "n1", 0, 1000),
        Message(1, "n1", 300 * S, 1000, force=True),
        Message(2, "n1", 600 * S, 1000),
    ]
    assert run(msgs, 600 * S)[0] == [0, 1]


def test_messages_without_a_sender_are_always_copied() -> None:
    msgs = [Message(i, None, i * S, 10) for i in range(5)]
    copied, advs, table = run(msgs, 10 * S)
    assert copied == [0, 1, 2, 3, 4] and advs == [] and len(table) == 0


def test_silent_sender_times_out_then_expires_then_is_new_again() -> None:
    _, advs, table = run([Message(0, "n1", 0, 1000)], 1799 * S)
    assert advs == [("new", "n1", 0)]
    assert run([], 1800 * S, table=table)[1] == [("timeout", "n1", 1800)]
    assert run([], 3000 * S, table=table)[1] == []  # advised once
    assert run([], 3600 * S, table=table)[1] == [("expire", "n1", 3600)]
    assert len(table) == 0
    copied, advs, _ = run([Message(1, "n1", 4000 * S, 1000)], 4000 * S, table=table)
    assert copied == [1] and advs == [("new", "n1", 4000)]


def test_timed_out_sender_seen_again_recovers_and_is_not_copied_early() -> None:
    _, _, table = run([Message(0, "n1", 0, 1000)], 2000 * S)
    copied, advs, _ = run([Message(1, "n1", 2100 * S, 1000)], 2100 * S, table=table)
    assert copied == [] and advs == [("recover", "n1", 2100)]


def test_a_gap_inside_one_batch_gives_the_same_advisories_as_clock_ticks() -> None:
    # No tick between the two messages (a backlog read in one batch): the timeout is still
    # advised at seen + warn, then the recovery, in event time.
    copied, advs, _ = run([Message(0, "n1", 0, 1000), Message(1, "n1", 2000 * S, 1000)], 2000 * S)
    assert advs == [("new", "n1", 0), ("timeout", "n1", 1800), ("recover", "n1", 2000)]
    copied, advs, _ = run([Message(0, "n1", 0, 1000), Message(1, "n1", 4000 * S, 1000)], 4000 * S)
    assert copied == [0, 1]
    assert advs == [("new", "n1", 0), ("timeout", "n1", 1800), ("expire", "n1", 3600), ("new", "n1", 4000)]


def test_a_busy_backlog_never_times_out_a_sender_that_kept_publishing() -> None:
    # Two hours of a node publishing every 300 s, replayed long after: the clock follows the
    # messages, so no timeout although the wall clock is far ahead.
    msgs = [Message(i, "n1", i * 300 * S, 1000) for i in range(24)]
    _, advs, _ = run(msgs, 23 * 300 * S)
    assert advs == [("new", "n1", 0)]


def test_by_default_an_expiry_found_late_is_advised_at_the_time_it_fell_due() -> None:
    """The replicator was down for three intervals: the sender's timeout and expiry are still
    advised, stamped when they fell due (event time), not when they were found."""
    msgs = [Message(1, "a", 0, 1000)]
    _, _, t = run(msgs, 60 * S)
    _, advs, t = run([], 3 * 3600 * S, table=t)
    assert advs == [(Event.TIMEOUT, "a", 1800), (Event.EXPIRE, "a", 3600)] and len(t) == 0


def test_late_expiry_drop_forgets_a_sender_found_late_without_advising_as_choria_does() -> None:
    """late_expiry: drop. Choria's replicator drops senders last seen more than twice the interval
    ago without advising (old state loaded after a restart); a sender expiring on time is still
    advised, and one coming back after being forgotten is new again."""
    p = dataclasses.replace(P, drop_late=True)
    _, _, t = run([Message(1, "a", 0, 1000), Message(2, "b", 1000 * S, 1000)], 1000 * S, p)
    _, advs, t = run([], 2 * 3600 * S, p, t)  # a: 2 intervals silent (dropped); b: 1.7 (advised)
    assert advs == [(Event.TIMEOUT, "b", 2800), (Event.EXPIRE, "b", 4600)] and len(t) == 0

    _, _, t = run([Message(1, "a", 0, 1000)], 0, p)
    copied, advs, t = run([Message(2, "a", 2 * 3600 * S, 1000)], 2 * 3600 * S, p, t)
    assert copied == [2] and advs == [(Event.NEW, "a", 7200)]  # no timeout or expire first


def test_advisory_document_and_ids() -> None:
    a = Advisory(Event.TIMEOUT, "n1.example.net", 1_763_840_000_000, 1_763_838_200_000)
    doc = json.loads(a.payload(P))
    assert doc == {"protocol": PROTOCOL, "event_id": a.event_id("REG"), "inspect_field": "sender", "age": 1800,
                   "seen": 1_763_838_200, "replicator": "dc1", "timestamp": 1_763_840_000, "event": "timeout",
                   "value": "n1.example.net"}  # fmt: skip
    assert a.subject("choria.adv.%s.%v") == "choria.adv.timeout.n1.example.net"
    assert len(a.event_id("REG")) == 27 and a.event_id("REG") == a.event_id("REG")
    assert a.event_id("REG") != Advisory(Event.EXPIRE, "n1.example.net", a.event_ms, a.seen_ms).event_id(
        "REG"
    )
    assert ksuid(1_700_000_000, "x") < ksuid(1_700_000_001, "a")  # k-sortable by time
    # An advisory replayed after an upgrade must keep its id (the target's duplicate window):
    # ids made by the earlier encoding, one digit per division.
    assert [
        ksuid(1_700_000_000, "x"),
        ksuid(0, ""),
        ksuid(1_400_000_000 + 2**32 - 1, "REG\x00n1\x00new\x001"),
    ] == [
        "2YBXZJup4TPHzdwoEnkbUky9DhK",
        "000006ArkOG1TgYww2IfEliuHCa",
        "aWgEPMdYqeGIBQeb8BW2oRImpFx",
    ]
    assert json.loads(a.payload(P, "given"))["event_id"] == "given"
    odd = 'nœud "7"\\ \u2028\x01'  # a sender's value as JSON must escape it: quotes, controls, non-ASCII
    assert json.loads(Advisory(Event.NEW, odd, a.event_ms, a.event_ms).payload(P))["value"] == odd
    assert 0 <= splay("a") < 1 and splay("a") == splay("a") != splay("b")


events = st.lists(
    st.tuples(
        st.integers(0, 7),  # sender (7 = no sender)
        st.integers(0, 2500),  # seconds since the previous message
        st.integers(900, 1100),  # size
        st.booleans(),  # force
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(events, st.lists(st.integers(1, 30), min_size=1, max_size=8), st.integers(1, 4), st.integers(0, 5000))
def test_bucketed_batched_engine_equals_the_reference(evts, cuts, buckets, tail) -> None:
    p = SamplingParams(inspect_ms=3600 * S, warn_ms=1800 * S, size_trigger=150, stream="R")
    msgs, t = [], 0
    for seq, (sender, dt, size, force) in enumerate(evts, start=1):
        t += dt * S
        msgs.append(Message(seq, None if sender == 7 else f"node{sender}", t, size, force))
    final = t + tail * S
    want_copied, want_advs = reference(msgs, final, p)

    # Cut into batches; each batch's clock is its last message's time (the source's clock).
    tables = [b"" for _ in range(buckets)]
    got_copied, got_advs, start, k = [], [], 0, 0
    while start < len(msgs) or k == 0:
        end = min(len(msgs), start + cuts[k % len(cuts)])
        batch = msgs[start:end]
        clock = batch[-1].ts_ms if batch else 0
        if end == len(msgs):
            clock = final
        for b in range(buckets):
            mine = [m for m in batch if bucket_of(m.sender or str(m.seq), buckets) == b]
            table = state.decode(tables[b])
            copies, advs = table.process(mine, clock, p)
            tables[b] = state.encode(table)
            got_copied += [m.seq for m, c in zip(mine, copies, strict=True) if c]
            got_advs += advs
        start, k = end, k + 1
    assert sorted(got_copied) == want_copied
    assert sorted(map(advisory_key, got_advs)) == sorted(map(advisory_key, want_advs))


def test_senders_gone_are_remembered_for_the_fleet_history_only() -> None:
    from replicator.sampling.rules import FLEET_HISTORY_MS

    _, _, t = run([Message(1, "a", 0, 1000), Message(2, "b", 0, 1000)], 0)
    run([Message(3, "b", 3000 * S, 1000)], 3600 * S, table=t)  # a expires on the clock, at 3600 s
    assert t.expired == {"a": 3600 * S}
    run([], 3600 * S + FLEET_HISTORY_MS - 1, table=t)  # b expires at 6600 s
    assert t.expired == {"a": 3600 * S, "b": 6600 * S}
    run([], 3600 * S + FLEET_HISTORY_MS, table=t)  # an hour after a's expiry: a is forgotten
    assert t.expired == {"b": 6600 * S}
    _, _, t = run([Message(1, "c", 0, 1000)], 0)
    run([], 2 * P.inspect_ms, dataclasses.replace(P, drop_late=True), t)  # forgotten unadvised
    assert t.expired == {"c": 2 * P.inspect_ms}


@settings(max_examples=300, deadline=None)
@given(events, st.integers(0, 5000), st.booleans())
def test_the_next_due_clock_is_the_first_that_changes_the_table(evts, tail, drop_late) -> None:
    """A caught-up sampled entry moves its clock only when it is due (the sink tells the
    planner): before the due time no clock changes the table, at it one does."""
    p = SamplingParams(inspect_ms=3600 * S, warn_ms=1800 * S, stream="R", drop_late=drop_late)
    msgs, t = [], 0
    for seq, (sender, dt, size, force) in enumerate(evts, start=1):
        t += dt * S
        msgs.append(Message(seq, None if sender == 7 else f"node{sender}", t, size, force))
    table = SenderTable()
    table.process(msgs, t + tail * S, p)
    due = table.next_due_ms(p)

    def moved_to(clock: int) -> tuple[list[Advisory], SenderTable]:
        copy = state.decode(state.encode(table))
        return copy.advance(clock, p), copy

    if due is None:  # nobody tracked or remembered: no clock ever changes it
        assert len(table) == 0 and not table.expired
        advs, later = moved_to(t + 100 * FLEET_HISTORY)
        assert advs == [] and len(later) == 0 and not later.expired
        return
    assert due > table.clock_ms
    advs, before = moved_to(due - 1)
    assert advs == [] and before.keys == table.keys and before.expired == table.expired
    assert list(before.warned) == list(table.warned)
    advs, at = moved_to(due)
    assert advs or at.expired != table.expired, "the due clock changed nothing"


FLEET_HISTORY = rules.FLEET_HISTORY_MS


def test_a_sender_reporting_every_300_s_is_copied_every_55_or_60_minutes_with_an_hours_interval() -> None:
    """configuration.md ("When a sender is due again"): with a message every 300 s and an
    hour's inspect_duration, each sender is copied every 55 or 60 minutes, and keeps its own."""
    senders = [f"node{i}.example.net" for i in range(2000)]
    msgs = [
        Message(t * len(senders) + i, s, t * 300 * S, 1000) for t in range(40) for i, s in enumerate(senders)
    ]
    copied, _, _ = run(msgs, 39 * 300 * S)
    copy_times: dict[str, list[int]] = {}
    copied_seqs = set(copied)
    for m in msgs:
        if m.seq in copied_seqs:
            copy_times.setdefault(m.sender, []).append(m.ts_ms // S)
    gaps = {s: {b - a for a, b in itertools.pairwise(times)} for s, times in copy_times.items()}
    assert all(len(copy_times[s]) >= 3 for s in senders)  # new, then at least two intervals
    assert set().union(*gaps.values()) == {3300, 3600}  # both occur over 2,000 senders
    assert all(len(g) == 1 for g in gaps.values())  # each sender keeps its interval
