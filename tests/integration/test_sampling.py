"""Sampling and advisories end to end: real NATS servers, the real replicator CLI (Spark), an
emulated fleet. Every copied message and every advisory is compared with the plain reference
of the rules computed from what the source stream actually holds."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from helpers import (
    SLOW_S,
    checkpoint_places,
    checkpoints_in,
    create_stream,
    publish,
    registration,
    run,
    run_until_handled,
    start_replicator,
    tree,
    wait_for,
    wait_handled,
    write_config,
)

from harness.scrape import read_samples, samples_of, scrape
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.headers import MSG_ID_HEADER, parse_source_header
from replicator.nats.wire import first_value
from replicator.sampling.reference import reference
from replicator.sampling.rules import Message, SamplingParams

pytestmark = pytest.mark.integration

SPEEDUP = 600  # 300 s publish interval -> 0.5 s; 1 h inspect -> 6 s; 30 m warn -> 3 s
INSPECT_MS, WARN_MS = 6000, 3000
SUBJECTS = ["choria.stream.input.registration.>"]


def fleet_file(
    path: Path, duration: str, events: list[dict[str, Any]], nodes: int = 200, seed: int = 3
) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "name": "sampling-it",
                "seed": seed,
                "speedup": SPEEDUP,
                "duration": duration,
                "fleet": {"nodes": nodes, "sizes": {"median": 1300, "min": 1100, "max": 2500}},
                "events": events,
            }
        )
    )
    return path


def emulate(scenario: Path, url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "run", "--scenario", str(scenario), "--url", url],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]


def advisories_counted(metrics_url: str) -> dict[str, int]:
    family = "choria_stream_replicator_advisor_total_messages"  # Choria's name and label
    return {s.labels["advisory"]: int(s.value) for s in samples_of(read_samples(metrics_url), family)}


def checkpoint_partitions(entry_dir: Path, batch: int = 0) -> str:
    """The shuffle partitions Spark recorded with a query's batch (`batch`: an index into its
    batches in order; the first by default, -1 the last)."""
    offsets = sorted((entry_dir / "checkpoint" / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    meta = json.loads(offsets[batch].read_text().splitlines()[1])
    return str(meta["conf"]["spark.sql.shuffle.partitions"])


def sampling_stream(src: str, dst: str, **over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "stream": "REG",
        "source_url": src,
        "target_url": dst,
        "inspect_field": "sender",
        "inspect_duration": f"{INSPECT_MS // 1000}s",
        "warn_duration": f"{WARN_MS // 1000}s",
        "size_trigger": 300,
        "inspect_force_field": "force",
        "advisory": {"subject": "choria.adv.%s.%v", "reliable": True},
    }
    cfg.update(over)
    return cfg


def expected(
    src: str, stream: str, key: Any, p: SamplingParams
) -> tuple[list[int], list[tuple[str, str, int]]]:
    msgs = run(read_all(src, stream))
    ref = []
    for m in msgs:
        sender, force = key(m)
        ref.append(Message(m.seq, sender, m.ts_ns // 1_000_000, len(m.data), force))
    final = max(m.ts_ms for m in ref) + p.inspect_ms  # every silent sender has expired by then
    copied, advs = reference(ref, final, p)
    return copied, sorted((a.sender, a.event, a.event_ms // 1000) for a in advs)


def copied(dst: str, target: str, config_name: str) -> list[int]:
    """Source sequences of the copies in the target, in target order (each carries its mark)."""
    seqs = []
    for m in run(read_all(dst, target)):
        mark = parse_source_header(first_value(m.headers, "Choria-SR-Source"))
        assert mark is not None and mark.config_name == config_name
        seqs.append(mark.sequence)
    return seqs


def got(
    src: str, dst: str, target: str, adv_stream: str, config_name: str
) -> tuple[list[int], list[Any], list[Any]]:
    seqs = copied(dst, target, config_name)
    docs = [json.loads(a.data) for a in run(read_all(src, adv_stream))]
    return seqs, sorted((d["value"], d["event"], d["timestamp"]) for d in docs), docs


def by_sender_field(m: Any) -> tuple[str | None, bool]:
    try:
        doc = orjson.loads(m.data)
    except orjson.JSONDecodeError:
        return None, False
    return doc.get("sender"), doc.get("force") is True


def params(stream: str = "REG") -> SamplingParams:
    return SamplingParams(inspect_ms=INSPECT_MS, warn_ms=WARN_MS, size_trigger=300, stream=stream)


def settle_expected(src: str, dst: str, proc: Any, timeout: float = SLOW_S) -> tuple[list[int], list[Any]]:
    """What the rules give for the source stream as it is now (copies, advisories), once the
    target and the advisory stream hold that much, and two seconds for anything extra to land."""
    want_copied, want_advs = expected(src, "REG", by_sender_field, params())
    wait_advisories(src, len(want_advs), proc, timeout)
    wait_for(lambda: run(count(dst, "REG")) >= len(want_copied), SLOW_S, "every copy", proc)
    wait_handled(proc, src, "REG")  # every message's copies and advisories are out
    return want_copied, want_advs


def wait_advisories(src: str, n: int, proc: Any, timeout: float = SLOW_S) -> None:
    wait_for(lambda: run(count(src, "ADV")) >= n, timeout, f"{n} advisories", proc)


def _assert_task_workers_without_pandas(root: int) -> None:
    """Embedded, the task workers that read the stream and ran the rules (on Arrow) never
    loaded pandas (~47 MB each: replicator.spark.arrow_without_pandas)."""
    workers = {}
    for pid, command in tree(root).items():
        if " pyspark.worker" in command:
            with contextlib.suppress(OSError):  # one that ended meanwhile
                workers[pid] = Path(f"/proc/{pid}/maps").read_text()
    busy = [pid for pid, maps in workers.items() if "/pyarrow/" in maps]  # not the daemon
    assert busy, workers.keys()
    assert not [pid for pid, maps in workers.items() if "/pandas/" in maps], workers.keys()


def test_fleet_sampling_matches_the_rules_copy_by_copy_and_advisory_by_advisory(
    source_server, nats_server, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", SUBJECTS))
    run(create_stream(src, "ADV", ["choria.adv.>"]))
    scenario = fleet_file(
        tmp_path / "fleet.yaml",
        "2h",
        [
            {"type": "down", "at": "30m", "duration": "40m", "count": 8},  # timeout, then recover
            {"type": "down", "at": "30m", "duration": "80m", "count": 6},  # timeout, expire, new
            {"type": "retire", "at": "20m", "count": 5},  # timeout, expire
            {"type": "metadata", "at": "50m", "bytes": 600, "count": 10},  # size trigger
            {"type": "force", "at": "55m", "count": 7},  # force field true
        ],
    )
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [sampling_stream(src, dst)])
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        emulate(scenario, src)
        want_copied, want_advs = settle_expected(src, dst, rep)
        counted = advisories_counted(rep.metrics_url)
        _assert_task_workers_without_pandas(rep.proc.pid)
    finally:
        assert rep.stop() == 0, rep.output()
    copied, advs, docs = got(src, dst, "REG", "ADV", "dc1")
    assert copied == want_copied
    assert advs == want_advs
    events = Counter(e for _, e, _ in advs)
    assert counted == dict(events)  # the metric counts what was published, by event
    assert events["recover"] >= 8 and events["expire"] >= 11 and events["new"] == 200 + 6
    # Steady nodes: one copy per inspect interval of their 300 s publishes (~12x fewer).
    published = run(count(src, "REG"))
    assert 8 < published / len(copied) < 13
    assert {d["protocol"] for d in docs} == {"io.choria.sr.v2.age_advisory"}
    assert all(d["replicator"] == "dc1" and d["inspect_field"] == "sender" for d in docs)
    assert len({d["event_id"] for d in docs}) == len(docs)  # no advisory doubled
    # The target's duplicate window knows an advisory by its Nats-Msg-Id: its own event id.
    ids = [
        (first_value(m.headers, MSG_ID_HEADER), json.loads(m.data)["event_id"])
        for m in run(read_all(src, "ADV"))
    ]
    assert len(ids) == len(docs) and all(header == payload for header, payload in ids)


def test_header_and_subject_token_keys_and_messages_without_a_sender(
    source_server, nats_server, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "BYHDR", ["hdr.>"]))
    run(create_stream(src, "BYTOK", ["tok", "tok.>"]))
    run(create_stream(src, "ADV", ["choria.adv.>"]))
    streams = [
        sampling_stream(src, dst, stream="BYHDR", name="hdr", inspect_field="", inspect_header="X-Node",
                        inspect_force_field="", target_stream="HDR_COPY", target_subject_prefix="copy",
                        sampling_partitions=3),
        sampling_stream(src, dst, stream="BYTOK", name="tok", inspect_field="", inspect_subject_token=2,
                        inspect_force_field="", target_stream="TOK_COPY", target_subject_prefix="copy"),
    ]  # fmt: skip
    cfg = write_config(tmp_path / "sr.yaml", "dc1", streams)
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        began = time.monotonic()
        for k in range(8):  # every 0.5 s for 3.5 s: within one inspect interval
            hdr = [(f"hdr.{i}", b"x" * 100, {"X-Node": f"n{i}"} if i < 5 else None) for i in range(8)]
            tok = [(f"tok.n{i}.reg", b"y" * 100, None) for i in range(5)] + [("tok", b"z", None)]
            run(publish(src, hdr + tok))
            # On a schedule: a publish slowed by a loaded machine does not push the rest back.
            time.sleep(max(0.0, began + 0.5 * (k + 1) - time.monotonic()))
        want_h = expected(src, "BYHDR", lambda m: (first_value(m.headers, "X-Node"), False), params("BYHDR"))
        want_t = expected(src, "BYTOK", lambda m: ([*m.subject.split("."), None][1], False), params("BYTOK"))
        wait_advisories(src, len(want_h[1]) + len(want_t[1]), rep)
        wait_for(lambda: run(count(dst, "TOK_COPY")) >= len(want_t[0]), SLOW_S, "token copies", rep)
        wait_for(lambda: run(count(dst, "HDR_COPY")) >= len(want_h[0]), SLOW_S, "header copies", rep)
        wait_handled(rep, src, "BYHDR")
        wait_handled(rep, src, "BYTOK")
    finally:
        assert rep.stop() == 0, rep.output()
    copied_h = copied(dst, "HDR_COPY", "hdr")
    copied_t = copied(dst, "TOK_COPY", "tok")
    assert copied_h == want_h[0] and copied_t == want_t[0]
    # 3 of 8 header messages per round have no X-Node: all 24 copied, plus the 5 senders once.
    assert len(copied_h) == 24 + 5
    # "tok" has no second token: its 8 messages are all copied, plus the 5 senders once.
    assert len(copied_t) == 8 + 5
    # Each sampled query's shuffle partitions come from its config, frozen in its checkpoint.
    assert checkpoint_partitions(tmp_path / "state" / "BYHDR_hdr") == "3"
    assert checkpoint_partitions(tmp_path / "state" / "BYTOK_tok") == "1"  # 32 buckets / 32
    advs = sorted(
        (d["value"], d["event"], d["timestamp"])
        for d in (json.loads(a.data) for a in run(read_all(src, "ADV")))
    )
    assert advs == sorted(want_h[1] + want_t[1])
    assert Counter(e for _, e, _ in advs) == {"new": 10, "timeout": 10, "expire": 10}


@pytest.mark.parametrize("place", ["state_store", "checkpoint_store"])
def test_kill_9_and_a_backlog_longer_than_warn_give_no_false_timeouts_and_nothing_twice(
    source_server, nats_server, tmp_path: Path, place: str
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", SUBJECTS))
    run(create_stream(src, "ADV", ["choria.adv.>"]))
    top = checkpoint_places(tmp_path)[place]
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [sampling_stream(src, dst)], **top)
    rep = start_replicator(cfg)
    rep.wait_ready(SLOW_S)
    # The fleet publishes for 12 s (2 inspect intervals); the replicator is killed -9 after 4 s
    # and stays down for ~8 s (more than warn_duration) while the fleet keeps publishing.
    fleet = subprocess.Popen(
        [sys.executable, "-m", "emulator.cli", "run", "--scenario",
         str(fleet_file(tmp_path / "fleet.yaml", "2h", [{"type": "retire", "at": "40m", "count": 4}], nodes=150)),
         "--url", src],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(4)
    rep.kill9()
    time.sleep(5)
    rep = start_replicator(cfg)
    try:
        assert fleet.wait(120) == 0, fleet.stderr.read() if fleet.stderr else ""
        want_copied, want_advs = settle_expected(src, dst, rep)
    finally:
        assert rep.stop() == 0, rep.output()
    copied, advs, docs = got(src, dst, "REG", "ADV", "dc1")
    assert copied == want_copied  # nothing lost, nothing twice
    assert advs == want_advs  # advisories exactly once, none false
    # Only the retired nodes and the end of the run silence anyone: no node that kept
    # publishing through the outage was advised as timed out before the fleet stopped.
    last_publish = max(m.ts_ns for m in run(read_all(src, "REG"))) // 1_000_000_000
    early = [d for d in docs if d["event"] == "timeout" and d["timestamp"] < last_publish - 1]
    assert len(early) == 4
    assert len({d["event_id"] for d in docs}) == len(docs)
    # The senders' state went where the config put the checkpoint, and only there.
    shared = checkpoints_in(tmp_path / "shared")
    assert (len(shared), len(checkpoints_in(tmp_path / "state"))) == ((1, 0) if top else (0, 1))
    assert ((shared or checkpoints_in(tmp_path / "state"))[0] / "state").is_dir()
    # A sampled process keeps Hadoop's checksummed local files: the RocksDB state store needs them.
    offsets = (shared or checkpoints_in(tmp_path / "state"))[0] / "offsets"
    assert [p.name for p in offsets.iterdir() if p.name.endswith(".crc")]
    if top:
        from helpers import cli

        out = cli("admin", "state", "--config", str(cfg))
        assert out.returncode == 0, out.stderr
        assert "tracked senders" in out.stdout.splitlines()[0]


def test_an_idle_sampled_entry_moves_its_clock_only_when_a_sender_falls_due(
    source_server, nats_server, tmp_path: Path
) -> None:
    """A batch with nothing but the clock runs every bucket's stateful function (~0.8 s of
    work): a caught-up entry with no messages moves its clock when a sender's timeout or expiry
    is due, not every second, and those advisories keep their exact times."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", SUBJECTS))
    run(create_stream(src, "ADV", ["choria.adv.>"]))
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [sampling_stream(src, dst)])
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        items = [
            (f"{SUBJECTS[0][:-1]}n{i}", json.dumps({"sender": f"n{i}"}).encode(), None) for i in range(4)
        ]
        run(publish(src, items))
        # new, then timeout 3 s later, then expire 6 s later: each sender's last advisory.
        want_copied, want_advs = settle_expected(src, dst, rep)
        assert Counter(e for _, e, _ in want_advs) == {"new": 4, "timeout": 4, "expire": 4}
        # Nobody is left to fall due (the fleet history's hour aside): no batch runs.
        before = scrape(rep.metrics_url)["batches"]
        time.sleep(4)
        idle = scrape(rep.metrics_url)["batches"] - before
    finally:
        assert rep.stop() == 0, rep.output()
    copied, advs, _ = got(src, dst, "REG", "ADV", "dc1")
    assert copied == want_copied and advs == want_advs  # exact event times, each once
    assert idle == 0, f"{idle:.0f} batches ran in 4 s with no sender due"
    assert (tmp_path / "state" / "REG_dc1" / "clock-due.json").is_file()


def test_admin_state_lists_tracked_senders_from_the_checkpoint(
    source_server, nats_server, tmp_path: Path
) -> None:
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", SUBJECTS))
    stream = sampling_stream(src, dst, inspect_duration="1h", warn_duration="30m", advisory=None)
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [stream])
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        for size in (1000, 1100, 1200):  # 100-byte steps: below size_trigger
            items = [(f"{SUBJECTS[0][:-1]}n{i}", json.dumps({"sender": f"n{i}", "pad": "x" * size}).encode(), None)
                     for i in range(5)]  # fmt: skip
            run(publish(src, items))
            time.sleep(0.3)
        wait_for(lambda: run(count(dst, "REG")) == 5, SLOW_S, "the 5 first copies", rep)
        wait_handled(rep, src, "REG")  # the last messages are in the state the stop commits
    finally:
        assert rep.stop() == 0, rep.output()
    msgs = run(read_all(src, "REG"))
    from helpers import cli

    out = cli("admin", "state", "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "5 tracked senders, 0 advised timed out" in lines[0]
    rows = {ln.split()[0]: ln.split() for ln in lines[2:]}
    assert sorted(rows) == [f"n{i}" for i in range(5)]
    for i in range(5):
        mine = [m for m in msgs if json.loads(m.data)["sender"] == f"n{i}"]
        _, seen, copied, size, advised = rows[f"n{i}"]
        assert int(size) == len(mine[-1].data) and advised == "no"
        assert seen[:19] == time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(mine[-1].ts_ns / 1e9))
        assert copied[:19] == time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(mine[0].ts_ns / 1e9))
    one = cli("admin", "state", "--config", str(cfg), "n3")
    assert one.returncode == 0 and len(one.stdout.splitlines()) == 3
    missing = cli("admin", "state", "--config", str(cfg), "nobody")
    assert "nobody: not tracked" in missing.stdout

    # The fleet at a glance: every sender joined within the last hour of the state's clock.
    fleet = cli("admin", "fleet", "--config", str(cfg), "--minutes", "60")
    assert fleet.returncode == 0, fleet.stderr
    assert (
        "5 senders: 5 healthy, 0 warning" in fleet.stdout and "changed in the last 60 min: 5" in fleet.stdout
    )
    assert sorted(ln.split()[1] for ln in fleet.stdout.splitlines() if ln.startswith("  new ")) == [
        f"n{i}" for i in range(5)
    ]

    # Back to Choria's replicator: its state file, written from ours, reads back the same senders.
    from replicator.sampling.choria_state import choria_state_file, read_choria_state

    exported = cli("admin", "export-state", "--config", str(cfg))
    assert exported.returncode == 0 and "5 senders written" in exported.stdout, exported.stderr
    back = {c.sender: c for c in read_choria_state(choria_state_file(tmp_path / "state", "REG", "dc1"))}
    assert sorted(back) == sorted(rows)
    assert all(back[name].size == int(rows[name][3]) and not back[name].advised for name in rows)

    # Started again with nothing new: every message was handled (5 copied, 10 skipped), so its
    # lag is 0, not the 10 skipped after the target's last copy (what a restart showed before).
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        lags = []
        for _ in range(8):  # the lag is measured every second
            lags.append(scrape(rep.metrics_url)["lag"])
            time.sleep(0.5)
    finally:
        assert rep.stop() == 0, rep.output()
    assert lags == [0] * len(lags), lags


RESTART_SENDERS = 40


def _restart_fleet_round(src: str, first: int) -> None:
    """400 registrations from the same RESTART_SENDERS senders, sizes growing slowly."""
    run(publish(src, [(f"reg.n{i % RESTART_SENDERS}", registration(i % RESTART_SENDERS, 500 + i), None)
                      for i in range(first, first + 400)]))  # fmt: skip


def _restart_entry(src: str, dst: str) -> dict[str, Any]:
    """A sampled entry whose senders are copied once an hour, whatever their sizes."""
    return {"stream": "REG", "source_url": src, "target_url": dst, "inspect_field": "sender",
            "inspect_duration": "1h", "size_trigger": 100_000}  # fmt: skip


def test_another_bucket_count_on_a_sampled_checkpoint_is_refused_and_copies_nothing_twice(
    source_server, nats_server, tmp_path: Path
) -> None:
    """Senders are kept in bucket crc32(sender) % sampling_buckets: a restart with another count
    looked each one up where it is not, copied it again as new (and would advise it new, and its
    old entry timeout). The checkpoint keeps its count; another is one clear line, and the entry
    copies nothing until the config says the checkpoint's count again."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"]))
    senders = RESTART_SENDERS
    _restart_fleet_round(src, 0)
    entry = _restart_entry(src, dst)
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [entry])
    run_until_handled(cfg, src, "REG")
    assert run(count(dst, "REG")) == senders  # each sender once: first seen

    _restart_fleet_round(src, 400)  # the same senders again, within inspect_duration: none is copied
    other = write_config(tmp_path / "sr.yaml", "dc1", [{**entry, "sampling_buckets": 8}])
    rep = start_replicator(other)
    try:
        refused = "sampling_buckets is 8 but the checkpoint"
        wait_for(lambda: refused in rep.output() or run(count(dst, "REG")) > senders, SLOW_S,
                 "the refusal of another bucket count, or copies made with it", rep)  # fmt: skip
        assert run(count(dst, "REG")) == senders  # before the fix: every sender copied again
        line = next(x for x in rep.output().splitlines() if refused in x)
        assert "set sampling_buckets: 32" in line, line
    finally:
        assert rep.stop() == 0, rep.output()
    assert run(count(dst, "REG")) == senders

    cfg = write_config(tmp_path / "sr.yaml", "dc1", [entry])
    run_until_handled(cfg, src, "REG")
    assert run(count(dst, "REG")) == senders


def test_a_sampled_checkpoint_keeps_its_shuffle_partitions_under_another_default(
    source_server, nats_server, tmp_path: Path
) -> None:
    """Each bucket's state lives in the shuffle partition that held it: a checkpoint made with 2
    partitions (the default until 2026-12-07) is run with 2 after a start whose config gives 1,
    so every sender is found where it was kept and none is copied again as new."""
    src, dst = source_server.url, nats_server.url
    run(create_stream(src, "REG", ["reg.>"]))
    entry_dir = tmp_path / "state" / "REG_dc1"
    _restart_fleet_round(src, 0)
    entry = _restart_entry(src, dst)
    run_until_handled(
        write_config(tmp_path / "sr.yaml", "dc1", [{**entry, "sampling_partitions": 2}]), src, "REG"
    )
    assert run(count(dst, "REG")) == RESTART_SENDERS  # each sender once: first seen
    assert checkpoint_partitions(entry_dir, batch=-1) == "2"

    _restart_fleet_round(src, 400)  # the same senders again, within inspect_duration: none is copied
    run_until_handled(write_config(tmp_path / "sr.yaml", "dc1", [entry]), src, "REG")  # the default: 1
    assert checkpoint_partitions(entry_dir, batch=-1) == "2"
    assert run(count(dst, "REG")) == RESTART_SENDERS
