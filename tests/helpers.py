"""Test helpers: fill and read streams on real servers, run the real CLI as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import yaml
from nats.js.api import StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NoStreamResponseError

from harness.localnats import free_port
from harness.process import ReplicatorProcess, process_tree
from harness.scrape import read_samples, samples_of
from harness.streams import copied_sequences
from replicator.nats import wire
from replicator.nats.connect import open_connection

# How long a test waits for a step that includes a replicator's start, a takeover or a batch:
# a bound for a hang, never a promise (those are checked with their own figures). On a loaded
# 2-core CI machine Spark alone once took 92 s to start.
SLOW_S = 300.0


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def create_stream(url: str, name: str, subjects: list[str], **kw: Any) -> None:
    nc = await nats.connect(url.split(","))
    try:
        kw.setdefault("allow_direct", True)
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=subjects, **kw))
    finally:
        await nc.close()


async def publish_once_led(
    js: JetStreamContext,
    subject: str,
    data: bytes,
    timeout: float = 30,
    headers: dict[str, str] | None = None,
) -> int:
    """JetStream-publish one message to a stream just created, and its sequence. A replicated
    stream answers only once its group has elected a leader and the leader's interest reached
    the server we are connected to; until then the publish has no responders, so nothing
    stored it and asking again cannot store it twice."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return (await js.publish(subject, data, headers=headers)).seq
        except NoStreamResponseError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def publish(
    url: str, items: list[tuple[str, bytes, dict[str, str] | None]], stream: str | None = None
) -> list[int]:
    """JetStream-publish (subject, data, headers) items; returns their sequences. The first is
    published alone, until the stream answers (a replicated stream just created may not yet),
    then the rest pipelined."""
    nc = await nats.connect(url.split(","))
    try:
        js = nc.jetstream(publish_async_max_pending=2000)
        if not items:
            return []
        (s, d, h), rest = items[0], items[1:]
        first = await publish_once_led(js, s, d, headers=h)
        futs = [await js.publish_async(s, d, headers=h) for s, d, h in rest]
        acks = await asyncio.gather(*futs)
        return [first, *(a.seq for a in acks)]
    finally:
        await nc.close()


def header_lines(headers: list[tuple[str, str | bytes]]) -> bytes:
    """`Name: value` lines; a bytes value goes on the wire as it is (a value that is not UTF-8,
    which no client library here would send)."""
    return b"".join(
        wire.encode_header_lines([(k, v)]) if isinstance(v, str) else b"%s: %s\r\n" % (k.encode(), v)
        for k, v in headers
    )


async def publish_raw(
    url: str, items: list[tuple[str | bytes, bytes, list[tuple[str, str | bytes]]]]
) -> list[int]:
    """JetStream-publish (subject, data, header pairs) with the replicator's own client, so a
    header name may repeat (nats-py's publish takes a dict), and a header value or the subject
    may be bytes that are not UTF-8; returns the sequences."""
    nc = await open_connection(url, name="test-raw-publish")
    seqs = []
    try:
        for subject, data, headers in items:
            reply = nc.new_inbox()
            fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

            def on_ack(_s: bytes, _r: bytes, d: bytes, _h: bytes | None, fut: Any = fut) -> None:
                if not fut.done():
                    fut.set_result(d)

            sub = await nc.raw_subscribe(reply, on_ack)
            # A bytes subject as the client reads one back (wire.wire_text), written as it was.
            text = wire.wire_text(subject) if isinstance(subject, bytes) else subject
            await nc.publish_encoded(text, reply, header_lines(headers), data)
            ack = json.loads(await asyncio.wait_for(fut, 10))
            await nc.raw_unsubscribe(sub)
            assert "error" not in ack, ack
            seqs.append(int(ack["seq"]))
    finally:
        await nc.close()
    return seqs


def wait_for(pred: Callable[[], bool], timeout: float, what: str, proc: Replicator | None = None) -> None:
    deadline = time.monotonic() + timeout
    unanswered = ""
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except nats.errors.TimeoutError as e:
            # The test's own look at a server (a STREAM.INFO) went unanswered for its 5 s: on a
            # loaded machine an R3 cluster can be that slow while it copies. Not the replicator's
            # doing, so the wait goes on; its deadline still holds.
            unanswered = f"; the last look at the servers went unanswered ({e})"
        if proc is not None and not proc.alive():
            code = proc.proc.returncode if proc.proc else None
            why = f"replicator exited ({code}) before {what}"
            raise AssertionError(f"{why}:\n{proc.output()}\n-> {why}")
        time.sleep(0.25)
    # The reason goes last as well: a long log is cut in the middle when CI prints it.
    why = f"timed out after {timeout}s waiting for {what} (at {time.strftime('%H:%M:%S')}){unanswered}"
    detail = f"\n{proc.output()}\n-> {why}" if proc is not None else ""
    raise AssertionError(f"{why}{detail}")


def handled_sequence(proc: Replicator, stream: str) -> int:
    """The last source sequence of `stream` the replicator has handled (copied or deliberately
    skipped), from its /metrics: a batch says so only once its copies and advisories are
    published. 0 while its monitor is not up yet (a restarted process)."""
    try:
        families = read_samples(proc.metrics_url)
    except OSError:
        return 0
    family = "choria_stream_replicator_replicator_stream_sequence"
    return max((int(s.value) for s in samples_of(families, family, stream=stream)), default=0)


def wait_handled(proc: Replicator, url: str, stream: str, timeout: float = SLOW_S) -> None:
    """Until the replicator has handled every message now in the source `stream`: nothing it
    copies or advises because of them can arrive later (a condition, not "wait N seconds")."""
    last = run(stream_last_sequence(url, stream))
    wait_for(lambda: handled_sequence(proc, stream) >= last, timeout, f"{stream} handled up to {last}", proc)


async def stream_last_sequence(url: str, stream: str) -> int:
    nc = await nats.connect(url.split(","))  # a cluster's URLs, comma-separated
    try:
        return int((await nc.jetstream().stream_info(stream)).state.last_seq)
    finally:
        await nc.close()


async def delete_stream(url: str, stream: str) -> None:
    """The stream deleted (a test's operator removing or replacing a target, say)."""
    nc = await nats.connect(url.split(","))
    try:
        await nc.jetstream().delete_stream(stream)
    finally:
        await nc.close()


async def update_stream(url: str, cfg: StreamConfig) -> None:
    """`cfg` applied to an existing stream (a test's operator fixing a target, say)."""
    nc = await nats.connect(url.split(","))
    try:
        await nc.jetstream().update_stream(cfg)
    finally:
        await nc.close()


async def stored_on(url: str, stream: str, subjects: str) -> int:
    """Messages of `stream` on `subjects` now: one STREAM.INFO, not a read of the stream (a test
    that reads whole streams while it waits starves its own publishing threads of the GIL)."""
    nc = await nats.connect(url.split(","))
    try:
        info = await nc.jetstream().stream_info(stream, subjects_filter=subjects)
        return sum((info.state.subjects or {}).values())
    finally:
        await nc.close()


def write_config(path: Path, name: str, streams: list[dict[str, Any]], **top: Any) -> Path:
    """A replicator config with a monitor port of its own (the harness waits on its /readyz)."""
    top.setdefault("monitor_port", free_port())
    cfg = {"name": name, "state_store": str(path.parent / "state"), "streams": streams, **top}
    path.write_text(yaml.safe_dump(cfg))
    return path


# The replicator CLI in a process of its own (harness.process), as tests drive it.
Replicator = ReplicatorProcess


def start_replicator(config: Path, *args: str, wait: bool = False) -> ReplicatorProcess:
    log_path = config.parent / f"replicator-{time.time_ns()}.log"
    return ReplicatorProcess(config, log_path, *args).start(wait=wait)


def run_until_handled(config: Path, url: str, stream: str, timeout: float = SLOW_S) -> None:
    """Start the replicator, let it replicate until it has handled every message now in the
    source `stream`, and stop it; it must end cleanly."""
    rep = start_replicator(config)
    try:
        rep.wait_ready(SLOW_S)
        wait_handled(rep, url, stream, timeout)
    finally:
        assert rep.stop() == 0, rep.output()


def tree(root: int) -> dict[int, str]:
    """Pid -> command line of `root` and its descendants (from /proc)."""
    return {pid: cmd.replace(b"\0", b" ").decode(errors="replace") for pid, cmd in process_tree(root).items()}


def tree_commands(root: int) -> list[str]:
    """Command lines of `root` and its descendants (from /proc)."""
    return list(tree(root).values())


def url_port(url: str) -> int:
    """The port of a server URL's first server ("nats://127.0.0.1:4222,..." -> 4222)."""
    return int(url.split(",")[0].rsplit(":", 1)[1])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI as a subprocess. Its `admin state` and `admin fleet` start Spark (8 s on a
    quiet machine; 60 s was not enough in a loaded CI run), so the bound is SLOW_S."""
    return subprocess.run(
        [sys.executable, "-m", "replicator.cli", *args], capture_output=True, text=True, timeout=SLOW_S
    )


def registration(i: int, size: int = 1000) -> bytes:
    body = {"sender": f"node{i % 100}.example.net", "i": i}
    pad = max(0, size - len(json.dumps(body)) - 10)
    body["pad"] = "x" * pad
    return json.dumps(body).encode()


def orders_backlog(
    src: str,
    dst: str,
    tmp_path: Path,
    n: int,
    batch_max_messages: int,
    copy_ahead: bool = False,
    replicas: int = 1,
    **top: Any,
) -> tuple[Path, int]:
    """A source stream ORDERS holding n ~1 KB messages and a replicator config that copies it to
    the target in batches of at most batch_max_messages (`top`: more top-level keys):
    (config path, n). Its users watch the query's batches copy the backlog (stopped, killed,
    logged mid-copy), so by default nothing is copied ahead of the query while Spark starts
    (that has tests of its own: test_head_start.py). `replicas`: the source stream's, which the
    target stream the replicator creates takes too."""
    run(create_stream(src, "ORDERS", ["orders.>"], num_replicas=replicas))
    run(publish(src, [(f"orders.{i % 13}", registration(i), None) for i in range(n)]))
    stream = {
        "stream": "ORDERS",
        "source_url": src,
        "target_url": dst,
        "batch_max_messages": batch_max_messages,
        "copy_ahead": copy_ahead,
    }
    return write_config(tmp_path / "sr.yaml", "dc1", [stream], **top), n


def checkpoint_places(tmp_path: Path) -> dict[str, dict[str, str]]:
    """Where a test's checkpoints go, by case: under state_store (the default), or at a
    checkpoint_store URI, read and written through Hadoop's FileSystem as s3a:// would be."""
    return {"state_store": {}, "checkpoint_store": {"checkpoint_store": (tmp_path / "shared").as_uri()}}


def checkpoints_in(root: Path) -> list[Path]:
    """The Spark checkpoints (directories with an offset log) under `root`."""
    return sorted(p.parent for p in root.rglob("offsets") if p.is_dir() and (p.parent / "metadata").exists())


def copied_source_sequences(url: str, stream: str) -> list[int]:
    """The source sequence of every copy in `stream`, in the target's order."""
    return run(copied_sequences(url, stream))


def bury_our_last_copy(dst: str) -> None:
    """Another writer stores 10,001 messages (`other.N`) in the target stream ORDERS after our
    last copy, past what a start reads of its tail, then its duplicate window (1 s in these
    tests) passes: the server drops the ids it keeps a moment after the window."""
    run(publish(dst, [(f"other.{i}", b"theirs", None) for i in range(10_001)]))
    time.sleep(2.0)


def restart_until_handled(config: Path, src: str, stream: str = "ORDERS") -> ReplicatorProcess:
    """A new start that handles everything the source stream holds now, then stops cleanly."""
    rep = start_replicator(config)
    try:
        rep.wait_ready(SLOW_S)
        wait_handled(rep, src, stream)
    finally:
        assert rep.stop() == 0, rep.output()
    return rep


def our_copies(dst: str, stream: str = "ORDERS") -> list[int]:
    """The source sequences of our copies in the target, in its order (another writer's left out)."""
    return [seq for seq in copied_source_sequences(dst, stream) if seq > 0]


PACKAGING = Path(__file__).parents[1] / "packaging"


def containerfile_instruction(name: str) -> str:
    """The arguments of the Containerfile's one `name` instruction (continuation lines joined)."""
    text = (PACKAGING / "container" / "Containerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith(name + " ")]
    assert len(lines) == 1, f"{name}: {lines}"
    return lines[0][len(name) + 1 :]


def start_without_the_jvm(
    directory: Path, module: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m module` as Spark starts it in local mode, through the workers' interpreter
    script (replicator.spark.pyworker), but without the JVM's port: the process stops as it
    connects back, and its traceback shows how it was started."""
    from replicator.spark.pyworker import worker_python

    base = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON_WORKER_FACTORY")}
    return subprocess.run([worker_python(sys.executable, directory), "-m", module],
                          env={**base, **(env or {})}, capture_output=True, text=True, timeout=60)  # fmt: skip


def binary_pickled_as_bytes(spark: Any) -> bool:
    """Whether `spark`'s JVM pickles a binary value for Python as one BINBYTES opcode with its
    bytes (replicator.spark.binary_pickler), not as Spark's bytes(bytearray(s, 'latin-1'))."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.sql.execution.python.EvaluatePython.registerPicklers()  # as Spark does first
    wrapper = getattr(jvm, "org.apache.spark.sql.execution.python.EvaluatePython$BytesWrapper")
    pickled = bytes(jvm.net.razorvine.pickle.Pickler(True, False).dumps(wrapper(bytearray(b"ab"))))
    return pickled.startswith(b"\x80\x02B\x02\x00\x00\x00ab")


async def purge_stream(url: str, stream: str) -> None:
    """Remove every message of `stream` (its first sequence moves past its last)."""
    nc = await nats.connect(url.split(","))
    try:
        await nc.jetstream().purge_stream(stream)
    finally:
        await nc.close()


async def delete_messages(url: str, stream: str, seqs: list[int]) -> None:
    """Delete messages `seqs` of `stream` (as its limits, or an operator, would)."""
    nc = await nats.connect(url.split(","))
    try:
        for seq in seqs:
            await nc.jetstream().delete_msg(stream, seq)
    finally:
        await nc.close()
