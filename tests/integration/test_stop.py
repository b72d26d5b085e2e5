"""Stopping as systemd and a terminal do: the signal goes to the replicator's whole process
group. It stops cleanly (one line, no traceback, exit 0) and the next start continues exactly."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import (
    SLOW_S,
    Replicator,
    bury_our_last_copy,
    checkpoints_in,
    copied_source_sequences,
    create_stream,
    orders_backlog,
    our_copies,
    publish,
    registration,
    restart_until_handled,
    run,
    start_replicator,
    tree,
    url_port,
    wait_for,
    wait_handled,
    write_config,
)

from harness.faultproxy import FaultProxy
from harness.streams import count_messages as count
from replicator.config import load_config
from replicator.entry_files import checkpoint_location, inflight_path, live_mark_path
from replicator.live_mark import read_live_mark
from replicator.runner import STOP_DEADLINE_S
from replicator.spark.checkpoint import committed_end, open_checkpoint
from replicator.spark.inflight import InflightRecord

from .test_sampling import SUBJECTS as SAMPLED_SUBJECTS
from .test_sampling import sampling_stream

pytestmark = pytest.mark.integration

# What a stop must not print: tracebacks, py4j's lost gateway, error log lines (ours or Spark's).
NOISE = (
    "Traceback",
    "Answer from Java side is empty",
    "EOFError",
    "Py4JError",
    "KeyboardInterrupt",
    " ERROR ",
)


def copy_under_way(src: str, dst: str, tmp_path: Path, n: int) -> tuple[Path, int, Replicator]:
    """A backlog of n messages being copied (2,000 done): (config, n, the replicator)."""
    cfg, n = orders_backlog(src, dst, tmp_path, n, batch_max_messages=500)
    rep = start_replicator(cfg)
    wait_for(lambda: run(count(dst, "ORDERS")) >= 2_000, SLOW_S, "copying under way", rep)
    return cfg, n, rep


@contextlib.contextmanager
def starting_slowly(cfg: Path, tmp_path: Path) -> Iterator[tuple[Replicator, dict[int, str]]]:
    """The replicator started with a Spark start slower than the stop deadline (a spark-env.sh
    that sleeps 70 s, as a slow conf script would), and a dict the test fills with its process
    tree while Spark starts (`tree(pid)`). The launch script outlives the replicator, asleep in
    a session of its own: each process noted is killed afterwards if it is still the same one
    (a pid freed since may be another process's by now). A replicator still running then (a
    failed assertion) is killed with its group."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-env.sh").write_text("sleep 70\n")
    env = {**os.environ, "SPARK_CONF_DIR": str(conf_dir)}
    rep = Replicator(cfg, tmp_path / "slow-start.log", env=env).start(wait=False)
    assert rep.proc is not None
    launch: dict[int, str] = {}
    try:
        yield rep, launch
    finally:
        if rep.alive():
            rep.kill9()
        for pid, command in launch.items():
            if pid != rep.proc.pid and _still(pid, command):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def restart_and_check_exact(cfg: Path, dst: str, n: int) -> None:
    """A new start copies the rest; the target then holds exactly the source, in order."""
    rep = start_replicator(cfg)
    try:
        wait_for(lambda: run(count(dst, "ORDERS")) >= n, SLOW_S, "the rest after the restart", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    assert copied_source_sequences(dst, "ORDERS") == list(range(1, n + 1)), "exactly the source, in order"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_to_the_whole_group_mid_copy_is_clean_and_resumable(
    source_server, nats_server, tmp_path: Path, sig: signal.Signals
) -> None:
    dst = nats_server.url
    cfg, n, rep = copy_under_way(source_server.url, dst, tmp_path, 30_000)
    assert rep.proc is not None
    os.killpg(rep.proc.pid, sig)  # the whole group, as systemd's stop and Ctrl-C do
    assert rep.proc.wait(60) == 0, rep.output()
    out = rep.output()
    assert out.count("stop requested") == 1
    assert not [n for n in NOISE if n in out], out
    assert run(count(dst, "ORDERS")) < n  # it really stopped mid-copy

    restart_and_check_exact(cfg, dst, n)


def spark_jvm(root: int) -> int:
    """The JVM's pid. A process the JVM is starting shows the JVM's command line too, between its
    vfork and its exec (a CI run caught one): asked again, it has become itself."""
    for _ in range(50):
        jvm = [pid for pid, cmd in tree(root).items() if "org.apache.spark.deploy.SparkSubmit" in cmd]
        if len(jvm) == 1:
            return jvm[0]
        time.sleep(0.1)
    raise AssertionError(f"not one Spark JVM under {root}: {tree(root)}")


def test_when_sparks_jvm_dies_the_replicator_exits_1_and_a_restart_continues_exactly(
    source_server, nats_server, tmp_path: Path
) -> None:
    dst = nats_server.url
    cfg, n, rep = copy_under_way(source_server.url, dst, tmp_path, 20_000)
    assert rep.proc is not None
    jvm = spark_jvm(rep.proc.pid)
    killed = time.monotonic()
    os.kill(jvm, signal.SIGKILL)
    # Not left running with nothing to copy with (and /healthz still saying ok): exit 1, for
    # systemd's Restart=on-failure or a container runtime's restart policy.
    assert rep.proc.wait(60) == 1, rep.output()
    took = time.monotonic() - killed
    assert "Spark's JVM is gone" in rep.output()
    # operations.md: "within a second or two" (it asks the JVM each second); a bound for a
    # loaded machine, well short of a wait for anything else (the 45 s stop deadline).
    print(f"\nthe JVM killed to the exit: {took:.1f} s")
    assert took < 10, took

    restart_and_check_exact(cfg, dst, n)


def _still(pid: int, command: str) -> bool:
    """Whether process `pid` still runs as `command` (a pid freed since may be another's): an
    ended process whose parent died stays a zombie until whatever adopted it reaps it, which a
    container's init may never do."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X") and tree(pid).get(pid) == command


@pytest.mark.parametrize("entry", ["copy", "sampled"])
def test_a_killed_driver_takes_sparks_jvm_and_python_workers_with_it(
    source_server, nats_server, tmp_path: Path, entry: str
) -> None:
    """operations.md: the JVM runs in a session of its own (so a terminal's signal reaches the
    driver only), yet it and Spark's Python workers end with the driver even when the driver
    alone is killed (the JVM exits when its stdin, a pipe from the driver, closes): no JVM left
    holding memory and the checkpoint's files after a kill -9. A sampled entry's rules run in
    Spark's Python task workers; the copy restarted after the kill is exact."""
    src, dst = source_server.url, nats_server.url
    seen: dict[int, str] = {}  # every process of the tree noted, killed afterwards if still itself
    rep: Replicator | None = None
    try:
        if entry == "copy":
            cfg, n, rep = copy_under_way(src, dst, tmp_path, 20_000)
        else:
            run(create_stream(src, "REG", SAMPLED_SUBJECTS))
            run(create_stream(src, "ADV", ["choria.adv.>"]))  # its reliable advisories' stream
            run(
                publish(
                    src, [("choria.stream.input.registration.x", registration(i), None) for i in range(2_000)]
                )
            )
            cfg = write_config(tmp_path / "sr.yaml", "dc1", [sampling_stream(src, dst)])
            rep = start_replicator(cfg)
            wait_handled(rep, src, "REG")
        assert rep.proc is not None
        jvm = spark_jvm(rep.proc.pid)
        seen.update(tree(rep.proc.pid))
        others = {pid: cmd for pid, cmd in seen.items() if pid != rep.proc.pid}
        assert jvm in others and os.getsid(jvm) != os.getsid(rep.proc.pid)  # beyond a group kill
        if entry == "sampled":
            workers = [pid for pid, cmd in others.items() if pid != jvm and "pyspark.worker" in cmd]
            assert workers, others  # the rules' task workers (replicator.spark.daemon)
        killed = time.monotonic()
        os.kill(rep.proc.pid, signal.SIGKILL)  # the driver alone, not its group
        rep.proc.wait(10)

        def still_running() -> list[int]:
            seen.update(tree(jvm))  # a worker forked since the snapshot counts too
            return [pid for pid, cmd in seen.items() if pid != rep.proc.pid and _still(pid, cmd)]

        wait_for(lambda: not still_running(), SLOW_S, "the driver's children gone")
        print(f"\nthe driver killed to its {len(others)} children gone: {time.monotonic() - killed:.1f} s")
    finally:
        if rep is not None and rep.alive():
            rep.kill9()
        for pid, cmd in seen.items():
            if _still(pid, cmd):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    if entry == "copy":
        restart_and_check_exact(cfg, dst, n)  # and the kill lost and doubled nothing


def test_a_stop_under_a_batch_that_cannot_end_abandons_it_after_10_s_and_loses_nothing(
    source_server, nats_server, tmp_path: Path
) -> None:
    """operations.md: a batch still running 10 s after the stop is abandoned with one warning,
    and read again on the next start. A batch runs until the one before it is acknowledged (its
    copies are published while the next is read), and each batch here takes about 10 s to
    publish: once the second batch is planned, the target's link stalls and the stop comes, so
    that batch can never end. The stop still ends within its deadline (exit 0), warns once, and
    the next start (the link back) copies the rest exactly, nothing lost or doubled."""
    dst = nats_server.url
    with FaultProxy(url_port(dst)) as link:
        link.bandwidth = 500_000  # ~500 copies a second: a batch of 5,000 publishes for ~10 s
        cfg, n = orders_backlog(source_server.url, link.url, tmp_path, 20_000, batch_max_messages=5_000)
        loaded = load_config(cfg)
        checkpoint = Path(checkpoint_location(loaded, loaded.streams[0]))
        rep = start_replicator(cfg)
        try:
            wait_for(lambda: (checkpoint / "offsets" / "1").exists(), SLOW_S, "the second batch planned", rep)
            link.stall()
            time.sleep(0.5)
            assert rep.proc is not None
            stopped = time.monotonic()
            os.killpg(rep.proc.pid, signal.SIGTERM)
            code = rep.proc.wait(STOP_DEADLINE_S + 30)
            took = time.monotonic() - stopped
        finally:
            if rep.alive():
                rep.kill9()
        out = rep.output(10**9)
        link.restore()
        link.bandwidth = 0
        assert code == 0, out
        assert out.count("the batch in flight did not end within 10s; abandoning it") == 1, out
        assert took < STOP_DEADLINE_S, took
        print(f"\nstop under a stalled batch: {took:.1f} s")
        assert run(count(dst, "ORDERS")) < n  # it really stopped mid-copy
        restart_and_check_exact(cfg, dst, n)


def test_a_stop_signal_while_caught_up_and_waiting_for_news_is_clean(
    source_server, nats_server, tmp_path: Path
) -> None:
    """A caught-up copy's planner spends its quiet spells waiting on the stream's doorbell
    (docs/design.md, "The source"), so a stop nearly always arrives during that wait: the stop
    lets the plan under way end (at most the wait) before it stops the query, and is as clean as
    any other (no traceback, one line, exit 0); the next start copies what came after, exactly."""
    src, dst = source_server.url, nats_server.url
    cfg, n = orders_backlog(src, dst, tmp_path, 1_000, batch_max_messages=500)
    rep = start_replicator(cfg)
    wait_for(lambda: run(count(dst, "ORDERS")) >= n, SLOW_S, "the backlog copied", rep)
    time.sleep(3)  # quiet: the doorbell armed, the planner waiting on it
    assert rep.proc is not None
    os.killpg(rep.proc.pid, signal.SIGTERM)
    assert rep.proc.wait(60) == 0, rep.output()
    out = rep.output(10**9)
    assert "does not hear" not in out, out  # the doorbell heard the stream: no fallback to polling
    assert not [n for n in NOISE if n in out], out

    run(publish(src, [(f"orders.{i % 13}", registration(i), None) for i in range(n, n + 200)]))
    restart_and_check_exact(cfg, dst, n + 200)


def test_ctrl_c_pressed_again_and_again_while_spark_starts_is_one_clean_stop(
    source_server, nats_server, tmp_path: Path
) -> None:
    """A user who presses Ctrl-C while Spark starts, and again while it still has not stopped,
    gets the one clean stop: PySpark gives a context made on the main thread a SIGINT handler
    that raises KeyboardInterrupt wherever that thread is, which skipped the stop (no `stopped`,
    a traceback, no mark of the copies made ahead). The next start continues exactly."""
    dst = nats_server.url
    cfg, n = orders_backlog(source_server.url, dst, tmp_path, 20_000, batch_max_messages=500)
    rep = start_replicator(cfg)
    assert rep.proc is not None
    wait_for(lambda: "starting Spark" in rep.output(10**9), SLOW_S, "Spark starting", rep)
    until = time.monotonic() + 90
    while rep.proc.poll() is None and time.monotonic() < until:  # every 50 ms, as an impatient user
        with contextlib.suppress(ProcessLookupError):  # it ended since the poll
            os.killpg(rep.proc.pid, signal.SIGINT)
        time.sleep(0.05)
    out = rep.output(10**9)
    assert rep.proc.wait(1) == 0, out
    assert out.count("stop requested") == 1, out
    assert [line for line in out.splitlines() if line.endswith(" stopped")], out
    assert not [n for n in NOISE if n in out], out

    restart_and_check_exact(cfg, dst, n)


def test_a_stop_while_spark_starts_slower_than_the_stop_deadline_is_clean(
    source_server, nats_server, tmp_path: Path
) -> None:
    """Spark's start took 53 s on a loaded CI machine, past the 45 s a clean stop has; a stop
    meanwhile waited for the session and was cut off at the deadline (exit 1, "clean stop took
    longer than 45s"). No query has begun then, so nothing needs the session: the stop ends
    without it, exit 0, and the next start continues exactly. The slow start is a spark-env.sh
    that sleeps, as a slow conf script would."""
    src, dst = source_server.url, nats_server.url
    cfg, n = orders_backlog(src, dst, tmp_path, 2_000, batch_max_messages=500, copy_ahead=True)
    with starting_slowly(cfg, tmp_path) as (rep, launch):
        wait_for(lambda: run(count(dst, "ORDERS")) >= n, SLOW_S, "the copies made ahead", rep)
        assert "Spark started" not in rep.output(10**9)  # still starting: the case under test
        launch.update(tree(rep.proc.pid))
        code = rep.stop(timeout=STOP_DEADLINE_S + 30)
        out = rep.output(10**9)
        assert code == 0, out
        assert "stopped while Spark started" in out, out  # not a session built after all
        assert [line for line in out.splitlines() if line.endswith(" stopped")], out
        assert not [n for n in NOISE if n in out], out
    run(publish(src, [(f"orders.{i % 13}", registration(i), None) for i in range(n, n + 200)]))
    restart_and_check_exact(cfg, dst, n + 200)


def _stop_while_spark_starts_with_the_target_stalled(
    src: str, dst: str, replicas: int, tmp_path: Path, stall_s: float, after_stop: Callable[[Path, int], None]
) -> tuple[Path, int, int]:
    """Copies made ahead while Spark starts (slowly), every target server's link stalled, a
    stop 0.5 s later, the links back `stall_s` after the stop; the stop must exit 0 without
    noise. `after_stop(cfg, n)` runs while the links are still there. (config, n, what the
    target held at the stall)."""
    with contextlib.ExitStack() as links_open:
        links = [links_open.enter_context(FaultProxy(url_port(u))) for u in dst.split(",")]
        for link in links:
            link.bandwidth = 2_000_000  # ~2,000 copies a second: the stall finds a chunk in flight
        cfg, n = orders_backlog(src, ",".join(link.url for link in links), tmp_path, 40_000,
                                batch_max_messages=2_000, copy_ahead=True, replicas=replicas)  # fmt: skip
        with starting_slowly(cfg, tmp_path) as (rep, launch):  # the stop comes while Spark starts
            wait_for(lambda: run(count(dst, "ORDERS")) >= 4_000, SLOW_S, "copies ahead under way", rep)
            launch.update(tree(rep.proc.pid))
            at_stall = run(count(dst, "ORDERS"))
            for link in links:
                link.stall()
            time.sleep(0.5)
            os.killpg(rep.proc.pid, signal.SIGTERM)
            time.sleep(stall_s)
            for link in links:
                link.restore()
            code = rep.proc.wait(STOP_DEADLINE_S + 30)
            out = rep.output(10**9)
            assert code == 0, out
            assert "stopped while Spark started" in out, out
            assert not [n for n in NOISE if n in out], out
        after_stop(cfg, n)
    return cfg, n, at_stall


def test_a_stop_while_spark_starts_lets_the_chunk_copied_ahead_get_its_acks(
    source_like_target, target_of_each_kind, tmp_path: Path
) -> None:
    """A stop while Spark starts gives the copies made ahead 1 s, then closes the target
    connection. A target slow to acknowledge the chunk being published (here its link stalled
    for 6 s around the stop) left that copier running past the close: it reconnected and sent
    its next chunk after the stop had written its mark of what the target acknowledged (5,000
    against 10,000 stored). Closing now waits for the chunk under way (bounded) and sends none
    after it: no record left in flight, a mark of every copy, exit 0 in time. Single servers,
    and 3-server clusters with R3 streams (every target server's link stalled)."""
    target, replicas = target_of_each_kind
    dst = target.url
    # The target answers again 6 s after the stop: well inside the close's 10 s.
    cfg, n, at_stall = _stop_while_spark_starts_with_the_target_stalled(
        source_like_target.url, dst, replicas, tmp_path, 6.0, lambda cfg, n: None
    )
    stored = run(count(dst, "ORDERS"))
    assert at_stall < stored < n, (
        at_stall,
        stored,
        "copies landed after the stall, and the stop came before the end",
    )
    loaded = load_config(cfg)
    entry = loaded.streams[0]
    assert not inflight_path(loaded, entry).exists(), inflight_path(loaded, entry).read_text()
    mark = read_live_mark(live_mark_path(loaded, entry))
    assert mark is not None and mark.seq == stored, (mark, stored)


def test_a_stop_while_spark_starts_past_the_closes_10_s_leaves_the_chunk_in_flight_for_the_next_start(
    source_like_target, target_of_each_kind, tmp_path: Path
) -> None:
    """operations.md: closing the target connection waits up to 10 s for the chunk being
    published; one still unacknowledged then stays recorded in flight, and the next start
    publishes it after reading what the target holds. Here the target answers again only 15 s
    after the stop: the stop still exits 0, the chunk stays recorded in flight, the mark (if
    any: the stall may catch the first chunk) claims none of it, and the next start copies the
    rest exactly (nothing lost or doubled).
    Single servers, and 3-server clusters with R3 streams."""
    target, replicas = target_of_each_kind
    dst = target.url
    left: dict[str, object] = {}

    def after_stop(cfg: Path, n: int) -> None:
        loaded = load_config(cfg)
        entry = loaded.streams[0]
        left["inflight"] = InflightRecord(inflight_path(loaded, entry)).read()
        left["mark"] = read_live_mark(live_mark_path(loaded, entry))
        left["stored"] = run(count(dst, "ORDERS"))
        restart_and_check_exact(cfg, dst, n)  # through the links: the target answers again

    _, _, at_stall = _stop_while_spark_starts_with_the_target_stalled(
        source_like_target.url, dst, replicas, tmp_path, 15.0, after_stop
    )
    inflight, mark, stored = left["inflight"], left["mark"], left["stored"]
    print(f"\nat the stall {at_stall}, stored {stored}, mark {mark}, in flight {inflight}")
    assert inflight is not None, "the unacknowledged chunk was not left recorded in flight"
    # The mark (none when the stall caught the first chunk) claims no copy of the chunk the
    # record holds, and none the target did not hold at the stall.
    assert mark is None or mark.seq < inflight.first_seq, (mark, inflight)  # type: ignore[attr-defined]
    assert mark is None or mark.seq <= at_stall, (mark, at_stall)  # type: ignore[attr-defined]


def test_a_kill_after_copying_ahead_leaves_a_mark_of_the_copies_acknowledged(
    source_like_target, target_of_each_kind, tmp_path: Path
) -> None:
    """Copied ahead while Spark starts (not a first start: its checkpoint holds batches), the
    target holds copies Spark's checkpoint knows nothing of. A kill -9 then, another writer
    burying our last copy under 10,000 messages, and the target's duplicate window passing: the
    next start did not find the copies in the target's tail, resumed from the last stop's mark
    and stored every copy made ahead again. The copies ahead now write the mark as their acks
    come. Single servers, and 3-server clusters with R3 streams."""
    src = source_like_target.url
    target, replicas = target_of_each_kind
    dst = target.url
    run(create_stream(dst, "ORDERS", ["orders.>", "other.>"], duplicate_window=1.0, num_replicas=replicas))
    cfg, n = orders_backlog(
        src, dst, tmp_path, 2_000, batch_max_messages=2_000, copy_ahead=True, replicas=replicas
    )
    rep = start_replicator(cfg)  # a first run: the query's checkpoint then holds its batches
    try:
        rep.wait_ready(SLOW_S)
        run(publish(src, [(f"orders.{i % 13}", registration(i), None) for i in range(n, n + 100)]))
        n += 100  # for the query to read, once its start is past the copies made ahead
        wait_for(lambda: _committed(tmp_path) >= n, SLOW_S, "the query's batches recorded", rep)
    finally:
        assert rep.stop() == 0, rep.output()
    more = 20_000
    run(publish(src, [(f"orders.{i % 13}", registration(i), None) for i in range(n, n + more)]))
    with starting_slowly(cfg, tmp_path) as (rep, launch):
        ahead = f"read {more} messages ahead of the query"
        wait_for(lambda: ahead in rep.output(10**9), SLOW_S, "the copies made ahead, acknowledged", rep)
        assert "Spark started" not in rep.output(10**9)  # still starting: the case under test
        launch.update(tree(rep.proc.pid))
        time.sleep(1.0)
        rep.kill9()
    assert run(count(dst, "ORDERS")) == n + more, "each copy ahead stored once before the kill"
    bury_our_last_copy(dst)
    restart_until_handled(cfg, src)
    ours = our_copies(dst)
    assert ours == list(range(1, n + more + 1)), f"{len(ours) - n - more} copies stored again"


def _committed(tmp_path: Path) -> int:
    """The last source sequence the query's checkpoint records as handled (0: none yet)."""
    found = checkpoints_in(tmp_path / "state")
    return (committed_end(open_checkpoint(str(found[0]), None)) or 1) - 1 if found else 0
