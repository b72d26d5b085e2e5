"""Start positions, filter, max_age, target creation, a late source, bad configs."""

from __future__ import annotations

import itertools
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
from helpers import (
    SLOW_S,
    Replicator,
    cli,
    create_stream,
    publish,
    publish_raw,
    run,
    start_replicator,
    stream_last_sequence,
    update_stream,
    wait_for,
    wait_handled,
    write_config,
)
from nats.js.api import StreamConfig

from harness.localnats import free_port
from harness.scrape import NS, read_samples, samples_of
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.nats.jetstream import stream_info
from replicator.nats.wire import first_value

pytestmark = pytest.mark.integration


def _seqs(url: str, stream: str) -> list[int]:
    return _seqs_of(run(read_all(url, stream)))


def _seqs_of(copies: list[Any]) -> list[int]:
    """The source sequence each copy names (Choria-SR-Source)."""
    from replicator.headers import SOURCE_HEADER, parse_source_header

    return [parse_source_header(first_value(m.headers, SOURCE_HEADER)).sequence for m in copies]  # type: ignore[union-attr]


def test_start_positions_filter_and_max_age(source_server, nats_server, tmp_path: Path) -> None:
    src, dst = source_server.url, nats_server.url
    for name in ("SEQ", "TIME", "END", "FILT", "AGE"):
        run(create_stream(src, name, [f"{name.lower()}.>"]))
    for name in ("SEQ", "TIME", "END", "FILT"):
        run(publish(src, [(f"{name.lower()}.{'a' if i % 2 else 'b'}", b"old", None) for i in range(100)]))
    time.sleep(1.2)
    cut = datetime.now(UTC)
    time.sleep(0.2)
    run(publish(src, [("time.a", b"new", None) for _ in range(10)]))
    # max_age 10s: 50 messages that will be old by the time the replicator starts, then fresh ones
    # published once AGE's query runs (each must be copied within 10 s of its publish).
    run(publish(src, [("age.x", b"stale", None) for _ in range(50)]))
    stale_at = time.monotonic()
    streams = [
        {"name": "seq", "stream": "SEQ", "start_sequence": 91},
        {"name": "time", "stream": "TIME", "start_time": cut.isoformat()},
        {"name": "end", "stream": "END", "start_at_end": True},
        {"name": "filt", "stream": "FILT", "filter_subject": "filt.a"},
        {"name": "age", "stream": "AGE", "max_age": "10s"},
    ]
    for s in streams:
        s.update(source_url=src, target_url=dst, target_stream=f"T_{s['stream']}", target_subject_prefix="t")
    cfg = write_config(tmp_path / "sr.yaml", "dc1", streams)
    time.sleep(max(0.0, stale_at + 10.5 - time.monotonic()))
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "T_SEQ")) >= 10, SLOW_S, "SEQ copied", rep)
        wait_for(lambda: run(count(dst, "T_FILT")) >= 50, SLOW_S, "FILT copied", rep)
        wait_for(lambda: run(count(dst, "T_TIME")) >= 10, SLOW_S, "TIME copied", rep)
        # Only after start: END copies what arrives now; AGE copies fresh messages.
        run(publish(src, [("end.a", b"after", None) for _ in range(5)]))
        wait_for(lambda: "AGE/age: replicating" in rep.output(), SLOW_S, "AGE's query", rep)
        run(publish(src, [("age.x", b"fresh", None) for _ in range(7)]))
        wait_for(lambda: run(count(dst, "T_END")) >= 5, SLOW_S, "END copied", rep)
        wait_for(lambda: run(count(dst, "T_AGE")) >= 7, SLOW_S, "AGE copied", rep)
        for s in streams:  # anything extra has landed too
            wait_handled(rep, src, s["stream"])
    finally:
        assert rep.stop() == 0, rep.output()
    assert _seqs(dst, "T_SEQ") == list(range(91, 101))
    assert _seqs(dst, "T_TIME") == list(range(101, 111))
    assert _seqs(dst, "T_END") == list(range(101, 106))
    assert _seqs(dst, "T_FILT") == list(range(2, 101, 2))
    assert [m.data for m in run(read_all(dst, "T_AGE"))] == [b"fresh"] * 7
    assert {m.subject for m in run(read_all(dst, "T_FILT"))} == {"t.filt.a"}


def test_a_source_whose_messages_all_expired_shows_no_lag(source_server, nats_server, tmp_path: Path) -> None:
    """Messages that expired before the replicator started can never be copied: its lag is 0,
    not the sequences they left behind (which it showed until a new message arrived), and what
    arrives afterwards is copied."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "GONE", ["gone.>"], max_age=2.0))
    run(publish(src, [("gone.x", b"expired", None) for _ in range(5)]))
    wait_for(lambda: run(count(src, "GONE")) == 0, SLOW_S, "every source message expired")
    port = free_port()
    entry = {
        "name": "gone",
        "stream": "GONE",
        "source_url": src,
        "target_url": dst,
        "target_stream": "T_GONE",
    }
    rep = start_replicator(write_config(tmp_path / "sr.yaml", "dc1", [entry], monitor_port=port))
    metrics_url = f"http://127.0.0.1:{port}/metrics"

    def lag() -> list[float]:
        return [s.value for s in samples_of(read_samples(metrics_url), f"{NS}_stream_lag_messages")]

    try:
        rep.wait_ready(SLOW_S)
        wait_for(lambda: "GONE/gone: replicating" in rep.output() and lag() != [], SLOW_S, "a lag", rep)
        for _ in range(3):  # set each second (replicator.runner)
            assert lag() == [0.0], rep.output()
            time.sleep(1)
        run(publish(src, [("gone.x", b"fresh", None) for _ in range(3)]))
        wait_for(lambda: run(count(dst, "T_GONE")) >= 3, SLOW_S, "the fresh messages copied", rep)
        wait_for(lambda: lag() == [0.0], SLOW_S, "lag 0 again", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    assert _seqs(dst, "T_GONE") == [6, 7, 8]


async def stream_config(url: str, stream: str) -> Any:
    """A stream's configuration as its server holds it."""
    nc = await nats.connect(url.split(","))
    try:
        info = await stream_info(nc, stream)
        assert info is not None, stream
        return info.config
    finally:
        await nc.close()


def test_target_created_from_source_config(source_server, nats_server, tmp_path: Path) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"], max_age=3600.0, max_msgs_per_subject=5, duplicate_window=30.0))
    run(publish(src, [("reg.a", b"1", None)]))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [
            {
                "stream": "REG",
                "source_url": src,
                "target_url": dst,
                "target_stream": "CENTRAL",
                "target_subject_prefix": "dc1",
            }
        ],
    )
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "CENTRAL")) >= 1, SLOW_S, "copy", rep)
    finally:
        assert rep.stop() == 0

    tc = run(stream_config(dst, "CENTRAL"))
    assert tc.subjects == ["dc1.reg.>"]
    assert tc.max_age == 3600.0 and tc.max_msgs_per_subject == 5 and tc.duplicate_window == 30.0
    # Open to fast-ingest batches, the copies' way in, on servers that take them (2.14+; here 2.15).
    assert tc.allow_batched is True


def test_a_source_with_per_message_ttls_is_copied_with_them(
    source_like_target, target_of_each_kind, tmp_path: Path
) -> None:
    """A target the replicator creates allows per-message TTLs where the source does, so the
    copies keep their Nats-TTL. A target created without them refuses such a copy: one line that
    names the setting, the entry held there; once the operator allows them, the copies land.
    On single servers and on R3 streams."""
    target, replicas = target_of_each_kind
    src, dst = source_like_target.url, target.url
    run(create_stream(src, "TTL", ["ttl.>"], allow_msg_ttl=True, num_replicas=replicas))
    run(create_stream(dst, "PLAIN", ["plain.ttl.>"], num_replicas=replicas))  # the operator's, without TTLs
    run(
        publish(
            src,
            [("ttl.a", b"1", {"Nats-TTL": "1h"}), ("ttl.b", b"2", None), ("ttl.c", b"3", {"Nats-TTL": "2h"})],
        )
    )
    base = {"stream": "TTL", "source_url": src, "target_url": dst}
    entries = [
        {**base, "name": "created"},
        {**base, "name": "operators", "target_stream": "PLAIN", "target_subject_prefix": "plain"},
    ]
    rep = start_replicator(write_config(tmp_path / "sr.yaml", "dc1", entries))
    try:
        wait_for(lambda: run(count(dst, "TTL")) >= 3, SLOW_S, "the copies in the created target", rep)
        fix = "per-message TTL is disabled (code 10166): allow them on the target stream (allow_msg_ttl)"
        wait_for(lambda: fix in rep.output(), SLOW_S, "the refusal", rep)
        assert run(count(dst, "PLAIN")) == 0  # held at the first copy with a TTL
        run(
            update_stream(
                dst,
                StreamConfig(
                    name="PLAIN", subjects=["plain.ttl.>"], allow_msg_ttl=True, num_replicas=replicas
                ),
            )
        )
        wait_for(lambda: run(count(dst, "PLAIN")) >= 3, SLOW_S, "the copies once TTLs are allowed", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    for target in ("TTL", "PLAIN"):
        copies = run(read_all(dst, target))
        assert [m.data for m in copies] == [b"1", b"2", b"3"], target
        assert [first_value(m.headers, "Nats-TTL") for m in copies] == ["1h", None, "2h"], target

    cfg = run(stream_config(dst, "TTL"))
    assert cfg.allow_msg_ttl is True and cfg.num_replicas == replicas


def test_a_source_s_delete_markers_are_copied_after_what_came_before_them(
    source_like_target, target_of_each_kind, tmp_path: Path
) -> None:
    """A source with subject_delete_marker_ttl stores a marker when a subject's last message
    expires (`Nats-Marker-Reason`, `Nats-TTL`, `Nats-Rollup: sub`). A target the replicator
    creates allows TTLs (such a source does), so the marker's copy is stored with those headers,
    after the copy before it: once each, nothing held. On single servers and on R3 streams."""
    target, replicas = target_of_each_kind
    src, dst = source_like_target.url, target.url
    run(
        create_stream(
            src, "DM", ["dm.>"], max_age=10.0, allow_msg_ttl=True, subject_delete_marker_ttl=60.0,
            num_replicas=replicas,
        )
    )  # fmt: skip
    entry = {"stream": "DM", "source_url": src, "target_url": dst}
    rep = start_replicator(write_config(tmp_path / "sr.yaml", "dc1", [entry]))
    # Messages and markers are removed once the stream's max_age has passed since they were
    # stored, whatever a marker's Nats-TTL (2.15): each is read while it is there (the target
    # the replicator creates has the same max_age).
    seen: dict[str, list[Any]] = {}

    def holds(url: str, n: int) -> bool:
        seen[url] = run(read_all(url, "DM"))
        return len(seen[url]) >= n

    try:
        rep.wait_ready(SLOW_S)
        run(publish(src, [("dm.a", b"short-lived", None)], stream="DM"))
        wait_for(lambda: holds(dst, 1), SLOW_S, "the message's copy", rep)
        first = seen[dst][0]
        wait_for(lambda: holds(src, 1) and seen[src][0].seq == 2, SLOW_S, "the source's marker")
        [marker] = seen[src]
        wait_for(lambda: run(stream_last_sequence(dst, "DM")) >= 2, SLOW_S, "the marker's copy", rep)
        [copy] = [m for m in run(read_all(dst, "DM")) if m.seq == 2]
        wait_handled(rep, src, "DM")  # a copy sent again would have landed by now
    finally:
        assert rep.stop() == 0, rep.output()
    assert run(stream_last_sequence(dst, "DM")) == 2  # the message's copy, then the marker's: once
    assert _seqs_of([first, copy]) == [1, 2] and (first.data, marker.seq) == (b"short-lived", 2)
    # The copy's own, and the chain's condition (stored with it)
    added = {"Choria-SR-Source", "Nats-Msg-Id", "Nats-Expected-Last-Msg-Id", "Nats-Expected-Last-Sequence"}
    assert [(k, v) for k, v in copy.headers if k not in added] == marker.headers
    assert {k: v for k, v in marker.headers} == {
        "Nats-Marker-Reason": "MaxAge",
        "Nats-TTL": "1m0s",
        "Nats-Rollup": "sub",
    }
    cfg = run(stream_config(dst, "DM"))
    assert cfg.allow_msg_ttl is True and cfg.num_replicas == replicas


def test_source_created_late_and_no_target_create(source_server, nats_server, tmp_path: Path) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(dst, "PRE", ["pre.>"]))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [
            {
                "name": "late",
                "stream": "LATE",
                "source_url": src,
                "target_url": dst,
                "target_stream": "PRE",
                "target_subject_prefix": "pre",
                "no_target_create": True,
            },
        ],
    )
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: "does not exist" in rep.output(), SLOW_S, "a waiting log line", rep)
        time.sleep(2)
        assert rep.proc.poll() is None, "must wait, not crash"
        run(create_stream(src, "LATE", ["late.>"]))
        run(publish(src, [("late.x", b"hello", None) for _ in range(3)]))
        wait_for(lambda: run(count(dst, "PRE")) >= 3, SLOW_S, "copy after the source appeared", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    assert {m.subject for m in run(read_all(dst, "PRE"))} == {"pre.late.x"}


def test_missing_target_with_no_target_create_is_a_clear_error(
    source_server, nats_server, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "X", ["x.>"]))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [{"stream": "X", "source_url": src, "target_url": dst, "no_target_create": True}],
    )
    # operations.md: a setup problem is one line on stderr and exit status 2 (the unit's
    # RestartPreventExitStatus: not restarted until someone fixes it).
    r = cli("run", "--config", str(cfg))
    assert r.returncode == 2, r.stderr
    # The error is the last line, whole (the lines before it are the log's, which goes to stderr).
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith(
        "stream-replicator: target stream X does not exist and no_target_create is set"
    )
    assert lines[-1].endswith("create it on the target cluster or unset no_target_create")
    assert [line for line in lines if "no_target_create" in line] == lines[-1:]
    assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        (
            "streams: []",
            "streams: give one or more stream entries (or heartbeats: for a file that only sends heartbeats)",
        ),
        ("bogus: 1", "bogus: unknown key"),
        (
            "streams: [{stream: S, source_url: 'nats://a', target_url: 'nats://b', start_delta: 3x}]",
            "streams[0].start_delta: invalid duration '3x'",
        ),
        (
            "streams: [{stream: S, source_url: 'nats://a', target_url: 'nats://b', ephemeral: true}]",
            "streams[0].ephemeral: true is not supported",
        ),
        (
            "streams: [{stream: S, source_url: 'nats://a:x', target_url: 'nats://b'}]",
            "streams[0].source_url: bad port",
        ),
        (
            "streams: [{stream: S, source_url: 'nats://a', target_url: 'nats://b', inspect_field: sender}]",
            "inspect_field needs inspect_duration",
        ),
        (
            "streams: [{stream: S, source_url: 'nats://a', target_url: 'nats://b', max_age: soon}]",
            "streams[0].max_age: invalid duration",
        ),
        (
            "streams: [{stream: 'a b', source_url: 'nats://a', target_url: 'nats://b'}]",
            "not a valid stream name",
        ),
        ("streams: [{source_url: 'nats://a', target_url: 'nats://b'}]", "streams[0].stream: is required"),
    ],
)
def test_invalid_configs_are_one_line_errors(tmp_path: Path, snippet: str, message: str) -> None:
    f = tmp_path / "bad.yaml"
    body = "name: dc1\n" + snippet + "\n"
    if not snippet.startswith("streams"):
        body += "streams: [{stream: S, source_url: 'nats://a', target_url: 'nats://b'}]\n"
    f.write_text(body)
    for cmd in ("validate", "run"):
        r = cli(cmd, "--config", str(f))
        assert r.returncode == 2
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert message in lines[0], lines[0]


def test_validate_accepts_a_good_file(tmp_path: Path) -> None:
    f = tmp_path / "ok.yaml"
    f.write_text(
        "name: dc1\nstreams: [{stream: S, source_url: 'nats://u:p@a:4222?connect_timeout=2', target_url: 'nats://b'}]\n"
    )
    r = cli("validate", "--config", str(f))
    assert r.returncode == 0 and "ok (1 stream)" in r.stdout


def test_a_stream_without_direct_gets_is_copied_exactly_with_every_header_value(
    source_server, nats_server, tmp_path: Path
) -> None:
    """The consumer fallback (no `allow_direct` on the source), through Spark, with a filter:
    every matching message once, in order, every value of a repeated header kept."""
    from replicator.headers import MSG_ID_HEADER, SOURCE_HEADER

    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "ND", ["nd.>"], allow_direct=False))
    items = [
        (f"nd.{'keep' if i % 3 else 'drop'}.{i}", f"m{i}".encode(), [("X-Tag", "a"), ("X-Tag", f"b{i}")])
        for i in range(1, 3001)
    ]
    seqs = run(publish_raw(src, items))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [{"stream": "ND", "source_url": src, "target_url": dst, "filter_subject": "nd.keep.>"}],
    )
    want = [(s, it) for s, it in zip(seqs, items, strict=True) if ".keep." in it[0]]
    rep = start_replicator(cfg, wait=True)
    try:
        wait_for(lambda: run(count(dst, "ND")) >= len(want), SLOW_S, "the filtered copy", rep)
        # And what arrives later, while the query runs, too.
        late = run(publish_raw(src, [("nd.keep.late", b"late", [("X-Tag", "z"), ("X-Tag", "y")])]))
        wait_for(lambda: run(count(dst, "ND")) >= len(want) + 1, SLOW_S, "the late message", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    got = run(read_all(dst, "ND"))
    assert _seqs(dst, "ND") == [s for s, _ in want] + late
    for m, (_, (subject, data, headers)) in zip(got, want, strict=False):
        assert (m.subject, m.data) == (subject, data)
        assert [
            (k, v)
            for k, v in m.headers or []
            if k not in (SOURCE_HEADER, MSG_ID_HEADER, "Nats-Expected-Last-Msg-Id")
        ] == headers
    assert [(k, v) for k, v in got[-1].headers or [] if k == "X-Tag"] == [("X-Tag", "z"), ("X-Tag", "y")]


def test_source_publish_conditions_are_not_copied_and_a_wrong_target_stream_stores_nothing(
    source_server, nats_server, tmp_path: Path
) -> None:
    from replicator.headers import MSG_ID_HEADER, SOURCE_HEADER

    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "S", ["s.>"]))
    # Published with conditions for the source's server; they must not reach the target's.
    cond = [("Nats-Expected-Stream", "S"), ("Nats-Expected-Last-Msg-Id", ""), ("X-Keep", "1")]
    run(publish_raw(src, [(f"s.{i}", b"x", cond) for i in range(20)]))
    run(create_stream(dst, "OTHER", ["wrong.>"]))
    run(create_stream(dst, "WANTED", ["wanted.>"]))
    cfg = write_config(
        tmp_path / "sr.yaml",
        "dc1",
        [
            {"name": "ok", "stream": "S", "source_url": src, "target_url": dst, "target_stream": "COPY"},
            # A wrong prefix: the copies' subjects belong to OTHER, not to the configured target.
            {"name": "bad", "stream": "S", "source_url": src, "target_url": dst, "target_stream": "WANTED",
             "target_subject_prefix": "wrong", "no_target_create": True},
        ],
    )  # fmt: skip
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "COPY")) >= 20, SLOW_S, "the copy", rep)
        wait_for(lambda: "which target stream WANTED does not hold (its subjects: wanted.>)" in rep.output(), SLOW_S,
                 "the refusal logged", rep)  # fmt: skip
    finally:
        assert rep.stop() == 0, rep.output()
    assert run(count(dst, "OTHER")) == 0  # held back before publishing, every retry
    assert "set target_subject_prefix/target_subject_remove" in rep.output()
    copies = run(read_all(dst, "COPY"))
    assert len(copies) == 20
    # The source's conditions are gone; each copy but the first names the one before it.
    assert [k for k, _ in copies[0].headers or []] == ["X-Keep", SOURCE_HEADER, MSG_ID_HEADER]
    for before, m in itertools.pairwise(copies):
        assert [k for k, _ in m.headers or []] == [
            "X-Keep",
            SOURCE_HEADER,
            MSG_ID_HEADER,
            "Nats-Expected-Last-Msg-Id",
        ]
        assert first_value(m.headers, "Nats-Expected-Last-Msg-Id") == first_value(
            before.headers, MSG_ID_HEADER
        )


# A URL no server answers at (connections refused), and what the replicator logs waiting on it.
UNANSWERED_URL = "nats://127.0.0.1:1"
UNANSWERED = "Connect call failed"


def _waiting_for_its_source(
    src: str, dst: str, tmp_path: Path, waiting: str = "does not exist"
) -> tuple[Replicator, int]:
    """A replicator waiting for its source stream LATE (the log line `waiting` seen), with its
    Spark JVM launched meanwhile (replicator.spark.early_jvm): the process and the JVM's pid."""
    cfg = write_config(
        tmp_path / "sr.yaml", "dc1", [{"stream": "LATE", "source_url": src, "target_url": dst}]
    )
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: waiting in rep.output(), SLOW_S, "a waiting log line", rep)
        wait_for(lambda: "launched Spark's JVM (pid " in rep.output(), SLOW_S, "the JVM launched", rep)
    except BaseException:
        rep.stop()
        raise
    return rep, int(rep.output().split("launched Spark's JVM (pid ")[1].split(")")[0])


@pytest.mark.parametrize("waiting_for", ["its stream", "its servers", "the target's servers"])
def test_stopped_while_waiting_for_its_source_it_exits_cleanly_and_its_jvm_with_it(
    source_server, nats_server, tmp_path: Path, waiting_for: str
) -> None:
    """Servers that do not answer are tried for ever: a stop while the first connection to
    either side was still being tried waited for the stop deadline (45 s), then exited 1 with
    "clean stop took longer than 45s"."""
    src, dst, waiting = source_server.url, nats_server.url, "does not exist"
    if waiting_for == "its servers":
        src, waiting = UNANSWERED_URL, UNANSWERED
    elif waiting_for == "the target's servers":
        run(create_stream(src, "LATE", ["late.>"]))
        dst, waiting = UNANSWERED_URL, UNANSWERED
    rep, jvm = _waiting_for_its_source(src, dst, tmp_path, waiting)
    assert rep.stop() == 0, rep.output()
    assert "Traceback" not in rep.output()
    assert "clean stop took longer" not in rep.output()
    wait_for(lambda: not Path(f"/proc/{jvm}").exists(), SLOW_S, "the JVM gone")


@pytest.mark.parametrize("source", ["exists", "missing", "unanswered", "exists, target unanswered"])
def test_a_java_that_will_not_start_is_a_one_line_error(
    source_server, nats_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """Also while the run waits for a source stream, or for its or the target's servers to
    answer (the run waited for them for ever before): waiting on could only end in this error."""
    src, dst = source_server.url, nats_server.url
    if source.startswith("exists"):
        run(create_stream(src, "J", ["j.>"]))
    if source == "unanswered":
        src = UNANSWERED_URL
    elif source.endswith("target unanswered"):
        dst = UNANSWERED_URL
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\necho 'this java cannot run' >&2\nexit 1\n")
    (home / "bin" / "java").chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(home))
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [{"stream": "J", "source_url": src, "target_url": dst}])
    rep = start_replicator(cfg)
    assert rep.proc is not None
    try:
        rep.proc.wait(120)
    finally:
        if rep.alive():
            rep.stop()
    out = rep.output()
    assert rep.proc.returncode == 2, out
    assert "Traceback" not in out
    assert out.strip().splitlines()[-1].startswith("stream-replicator: [JAVA_GATEWAY_EXITED]"), out
    assert "this java cannot run" in out  # what the JVM's launch printed reaches the log


def test_a_jvm_killed_while_the_run_waits_for_its_source_exits_1_for_a_restart(
    source_server, nats_server, tmp_path: Path
) -> None:
    """As when it dies under a running session (docs/operations.md): exit status 1, which the
    shipped systemd unit restarts (2, a setup problem, it does not)."""
    rep, jvm = _waiting_for_its_source(source_server.url, nats_server.url, tmp_path)
    assert rep.proc is not None
    try:
        os.kill(jvm, signal.SIGKILL)
        rep.proc.wait(60)
    finally:
        if rep.alive():
            rep.stop()
    out = rep.output()
    assert rep.proc.returncode == 1, out
    assert "Traceback" not in out
    assert (
        "Spark's JVM is gone (exit code -9) before its session started; exiting (exit status 1) so that "
        "the service is restarted" in out
    ), out
