"""Hostile input, end to end on real servers: header values with control bytes, subjects of
many tokens, a message at the server's max_payload, and on a sampled stream payloads of 10 MB,
non-JSON and senders whose names are not subject tokens. Each copy is compared with its source
as the server stores both (raw header lines, subject, data), not through our own parser."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from helpers import (
    SLOW_S,
    create_stream,
    publish,
    publish_raw,
    run,
    start_replicator,
    update_stream,
    wait_for,
    write_config,
)
from nats.js.api import StreamConfig

from harness.localnats import NatsCluster
from harness.process import entry_state
from harness.servers import nats_cluster
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.connect import open_connection
from replicator.nats.wire import first_value
from replicator.sampling.rules import SamplingParams

from .test_sampling import expected, sampling_stream

pytestmark = pytest.mark.integration

MB = 1024 * 1024
# Headers the replicator adds to a copy; everything else must be the source's, byte for byte.
ADDED = {SOURCE_HEADER.lower(), "nats-msg-id", "nats-expected-last-msg-id", "nats-expected-last-sequence"}


def max_payload_conf(mb: int) -> str:
    return f"max_payload: {mb}MB"


@pytest.fixture
def big_source() -> Iterator[NatsCluster]:
    with nats_cluster(1, "source", extra=max_payload_conf(12)) as c:
        yield c


@pytest.fixture
def big_target() -> Iterator[NatsCluster]:
    with nats_cluster(1, "target", extra=max_payload_conf(12)) as c:
        yield c


async def raw_messages(url: str, stream: str) -> list[tuple[str, list[bytes], bytes]]:
    """(subject, header lines, data) of every message, from the server's own JSON API (the raw
    header block, base64), so no client library's header parsing stands in between."""
    nc = await nats.connect(url.split(","), max_reconnect_attempts=1)
    out = []
    try:
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)).data)
        for seq in range(info["state"]["first_seq"], info["state"]["last_seq"] + 1):
            req = json.dumps({"seq": seq}).encode()
            doc = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", req, timeout=10)).data)
            m = doc["message"]
            block = base64.b64decode(m.get("hdrs", "")) if m.get("hdrs") else b""
            lines = [ln for ln in block.split(b"\r\n")[1:] if ln]
            out.append((m["subject"], lines, base64.b64decode(m.get("data", ""))))
    finally:
        await nc.close()
    return out


async def stored_subjects(url: str, stream: str) -> list[bytes]:
    """Every message's subject as the server stores it, from direct gets' raw replies: the
    server's JSON API writes a subject that is not UTF-8 with U+FFFD, and nats-py cannot read
    one."""
    nc = await open_connection(url, name="test-stored-subjects")
    out = []
    try:
        info = await nc.jetstream().stream_info(stream)
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            # On an R3 stream a replica may answer before it holds the message, or just after
            # direct gets were allowed: asked again.
            for _ in range(50):
                reply = nc.new_inbox()
                fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

                def on_reply(_s: bytes, _r: bytes, _d: bytes, block: bytes | None, fut: Any = fut) -> None:
                    if not fut.done():
                        fut.set_result(block or b"")

                sub = await nc.raw_subscribe(reply, on_reply)
                await nc.publish_encoded(
                    f"$JS.API.DIRECT.GET.{stream}", reply, b"", json.dumps({"seq": seq}).encode()
                )
                block = await asyncio.wait_for(fut, 10)
                await nc.raw_unsubscribe(sub)
                if block.startswith(b"NATS/1.0\r\n"):
                    break
                await asyncio.sleep(0.1)
            assert block.startswith(b"NATS/1.0\r\n"), block  # a message, not a status (404, 503)
            found = re.search(rb"\r\nNats-Subject: ([^\r]*)\r\n", block)
            assert found is not None, block
            out.append(found.group(1))
    finally:
        await nc.close()
    return out


def without_added(lines: list[bytes]) -> list[bytes]:
    return [ln for ln in lines if ln.partition(b":")[0].strip().decode().lower() not in ADDED]


def restart_with_max_payload(cluster: NatsCluster, mb: int) -> None:
    server = cluster.servers[0]
    server.stop()
    conf = server.config_file.read_text()
    server.config_file.write_text(conf.replace(max_payload_conf(12), max_payload_conf(mb)))
    server.start()


HOSTILE_HEADERS = [
    ("X-Ctl", "a\tb\x01c\x1fd\x7fe"),
    ("X-Utf8", "ünïcødé ✓ 日本"),
    ("X-Repeated", "one"),
    ("X-Repeated", "two"),
    ("X-Colons", "a: b: c"),
]


def test_hostile_messages_are_copied_byte_for_byte_or_stopped_before_with_one_line(
    big_source: NatsCluster, big_target: NatsCluster, tmp_path: Path
) -> None:
    src, dst = big_source.url, big_target.url
    run(create_stream(src, "RAW", ["raw.>"]))
    run(create_stream(src, "REG", ["reg.>"]))
    run(create_stream(src, "ADV", ["adv.>"]))
    many_tokens = "raw." + ".".join(f"t{i}" for i in range(250))
    header_bytes = len(b"NATS/1.0\r\n" + b"X-Big: 1\r\n" + b"\r\n")
    at_max = 12 * MB - header_bytes  # headers and data together exactly at the server's limit
    raw_items = [
        ("raw.ctl", b"control headers", HOSTILE_HEADERS),
        (many_tokens, b"many tokens", [("X-Many", "yes")]),
        ("raw.max", b"m" * at_max, [("X-Big", "1")]),
        *[(f"raw.after.{i}", b"after the big one", []) for i in range(5)],
    ]
    run(publish_raw(src, raw_items))

    stream_raw = {"stream": "RAW", "source_url": src, "target_url": dst, "name": "raw"}
    stream_reg = sampling_stream(
        src, dst, stream="REG", name="reg", inspect_duration="1h", warn_duration="30m",
        inspect_force_field="", advisory={"subject": "adv.%s.%v", "reliable": True},
    )  # fmt: skip
    cfg = write_config(tmp_path / "sr.yaml", "dc1", [stream_raw, stream_reg])
    rep = start_replicator(cfg)
    try:
        # The sampled entry, not the process: the RAW entry may already be held at the refused
        # copy (copied ahead while Spark starts), and a held entry is not ready.
        wait_for(
            lambda: entry_state(rep.metrics_url, "REG/reg") == "replicating",
            SLOW_S,
            "REG/reg replicating",
            rep,
        )
        reg_items = [
            ("reg.big", json.dumps({"sender": "big", "pad": "x" * (10 * MB)}).encode(), []),
            ("reg.bin", b"\x00\xff\xfe not json at all", []),
            ("reg.arr", b"[1, 2, 3]", []),
            ("reg.empty", b"", []),
            ("reg.big", json.dumps({"sender": "big", "pad": "small"}).encode(), []),  # resized: copied
            ("reg.big", json.dumps({"sender": "big", "pad": "small"}).encode(), []),  # skipped
            ("reg.odd", json.dumps({"sender": "web 01.*.example..net>"}).encode(), []),
            ("reg.num", json.dumps({"sender": 42}).encode(), []),
        ]
        run(publish_raw(src, reg_items))

        def sender(m: Any) -> tuple[str | None, bool]:
            try:
                v = json.loads(m.data).get("sender")
            except (ValueError, AttributeError):
                return None, False
            return (str(v) if v is not None else None), False

        p = SamplingParams(inspect_ms=3_600_000, warn_ms=1_800_000, size_trigger=300, stream="REG")
        want_reg, _ = expected(src, "REG", sender, p)
        wait_for(lambda: run(count(dst, "REG")) >= len(want_reg), SLOW_S, "the sampled copies", rep)
        wait_for(lambda: run(count(src, "ADV")) >= 3, SLOW_S, "the advisories", rep)
        # The copy at max_payload cannot fit under the target's same limit once the replicator's
        # headers are added: it is stopped before, with one line that names the fix.
        wait_for(lambda: "max_payload" in rep.output(), SLOW_S, "the refusal", rep)
        assert run(count(dst, "RAW")) == 2  # the two before it, nothing after it
        # Held at the refused copy, and /readyz says so (docs/operations.md).
        wait_for(
            lambda: entry_state(rep.metrics_url, "RAW/raw") == "retrying", SLOW_S, "RAW/raw retrying", rep
        )
        refusal = [ln for ln in rep.output(10**7).splitlines() if "max_payload" in ln]
        assert refusal and "raise" in refusal[0], refusal

        restart_with_max_payload(big_target, 16)  # the operator raises the target's limit
        wait_for(lambda: run(count(dst, "RAW")) >= len(raw_items), SLOW_S, "the rest after the fix", rep)
        time.sleep(2)
    finally:
        assert rep.stop() == 0, rep.output()

    source, copies = run(raw_messages(src, "RAW")), run(raw_messages(dst, "RAW"))
    assert [s for s, _, _ in copies] == [s for s, _, _ in source]  # in order, subjects intact
    for (_, src_lines, src_data), (_, dst_lines, dst_data) in zip(source, copies, strict=True):
        assert without_added(dst_lines) == src_lines  # every header line as stored, in order
        assert dst_data == src_data
    assert [mark.sequence for mark in marks(dst, "RAW")] == list(range(1, len(raw_items) + 1))

    reg_copies = run(raw_messages(dst, "REG"))
    reg_source = run(raw_messages(src, "REG"))
    assert [mark.sequence for mark in marks(dst, "REG")] == want_reg
    assert [d for _, _, d in reg_copies] == [reg_source[s - 1][2] for s in want_reg]
    advs = [json.loads(m.data) for m in run(read_all(src, "ADV"))]
    subjects = {m.subject for m in run(read_all(src, "ADV"))}
    assert Counter(a["event"] for a in advs) == {"new": 3}
    assert {a["value"] for a in advs} == {"big", "web 01.*.example..net>", "42"}
    assert "adv.new.web_01._.example._.net_" in subjects  # a valid subject, no wildcard


def marks(url: str, stream: str) -> list[Any]:
    out = []
    for m in run(read_all(url, stream)):
        mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
        assert mark is not None
        out.append(mark)
    return out


# Headers no client library here would send, on the wire as bytes: values that are not UTF-8,
# names that are not RFC 7230 tokens, values with edge characters that Python counts as blanks;
# and a sender's own Status and Description, the names nats-py gives a reply's status line.
ODD_HEADERS: list[tuple[str, str | bytes]] = [
    ("X-Latin1", b"caf\xe9 cr\xe8me"),
    ("X-Half", b"\xe6\x97"),  # the first two bytes of a three-byte character
    ("X-Plain", "ascii"),
    ("X-Latin1", b"\xff\xfe"),  # repeated, in order
    ("X(1)", b"v"),
    ("X@y", b"1"),
    ("X-Edge", b"x\x1f"),
    ("X-Nbsp", b"\xc2\xa0x\xc2\xa0"),
    ("Status", b"mine"),
    ("Description", b"my own"),
]


def test_headers_no_client_here_would_send_are_copied_byte_for_byte(
    source_like_target: NatsCluster, target_of_each_kind: tuple[NatsCluster, int], tmp_path: Path
) -> None:
    """A header's bytes and a subject's are the sender's: a copy keeps them exactly, whichever
    way it is made (copied ahead or live by the driver, from a batch's rows read by the driver or
    by Spark's tasks through the JVM, read by a pull consumer where a stream has no direct gets,
    a sampled entry's read-back), and a sender named by such a header is still sampled and
    advised, each byte that is not UTF-8 as U+FFFD. On single servers and on R3 streams, where
    the copies are read from replicas and go to the target in fast-ingest batches."""
    target_cluster, replicas = target_of_each_kind
    src, dst = source_like_target.url, target_cluster.url
    run(create_stream(src, "RAW", ["raw.>"], num_replicas=replicas))
    run(create_stream(src, "PULL", ["pull.>"], allow_direct=False, num_replicas=replicas))
    run(create_stream(src, "REG", ["reg.>"], num_replicas=replicas))
    run(create_stream(src, "ADV", ["adv.>"], num_replicas=replicas))

    def raw_items(tag: str) -> list[tuple[str | bytes, bytes, list[tuple[str, str | bytes]]]]:
        # The last with a subject that is not UTF-8 either.
        subjects: list[str | bytes] = [f"raw.{tag}.{i}" for i in range(3)] + [
            b"raw.%s.caf\xe9" % tag.encode()
        ]
        return [(subject, f"{tag} {i}".encode(), ODD_HEADERS) for i, subject in enumerate(subjects)]

    def reg_items(tag: str) -> list[tuple[str | bytes, bytes, list[tuple[str, str | bytes]]]]:
        return [
            (f"reg.{tag}", json.dumps({"i": tag}).encode(), [("X-Node", b"n\xe9ud-1"), *ODD_HEADERS]),
            (f"reg.{tag}", b"{}", [("X-Node", "plain-2"), *ODD_HEADERS]),
            (b"reg.%s.caf\xe9" % tag.encode(), b"{}", [("X-Node", "odd-3"), *ODD_HEADERS]),
        ]

    def pull_items(tag: str) -> list[tuple[str | bytes, bytes, list[tuple[str, str | bytes]]]]:
        return [(f"pull.{tag}", b"p", ODD_HEADERS), (b"pull.%s.caf\xe9" % tag.encode(), b"q", ODD_HEADERS)]

    run(publish_raw(src, raw_items("before") + reg_items("before") + pull_items("before")))
    stream_raw = {"stream": "RAW", "source_url": src, "target_url": dst, "name": "raw"}
    stream_pull = {"stream": "PULL", "source_url": src, "target_url": dst, "name": "pull"}
    stream_reg = sampling_stream(
        src, dst, stream="REG", name="reg", inspect_field="", inspect_header="X-Node",
        inspect_force_field="", inspect_duration="1h", warn_duration="30m",
        advisory={"subject": "adv.%s.%v", "reliable": True},
    )  # fmt: skip
    # The same stream again, every copy made from the rows of the query's batches: read by the
    # driver, and (`order: subject`) read by Spark's tasks and published by its lanes.
    stream_batches = {
        **stream_raw, "name": "batches", "target_stream": "RAW_BATCHES", "target_subject_prefix": "batches",
        "copy_ahead": False, "copy_live": False,
    }  # fmt: skip
    stream_lanes = {
        **stream_raw, "name": "lanes", "target_stream": "RAW_LANES", "target_subject_prefix": "lanes",
        "order": "subject",
    }  # fmt: skip
    entries = [stream_raw, stream_batches, stream_lanes, stream_reg, stream_pull]
    cfg = write_config(tmp_path / "sr.yaml", "dc1", entries)
    rep = start_replicator(cfg)
    try:
        rep.wait_ready(SLOW_S)
        run(publish_raw(src, raw_items("after") + reg_items("after") + pull_items("after")))
        for target, n in (("RAW", 8), ("RAW_BATCHES", 8), ("RAW_LANES", 8), ("PULL", 4)):
            wait_for(lambda t=target, n=n: run(count(dst, t)) >= n, SLOW_S, f"the copies in {target}", rep)
        # Three senders, each copied when first seen; the second round is within the hour.
        wait_for(lambda: run(count(dst, "REG")) >= 3, SLOW_S, "the sampled copies", rep)
        wait_for(lambda: run(count(src, "ADV")) >= 3, SLOW_S, "the advisories", rep)
        time.sleep(2)
    finally:
        assert rep.stop() == 0, rep.output()

    source = run(raw_messages(src, "RAW"))
    assert source[0][1][:2] == [b"X-Latin1: caf\xe9 cr\xe8me", b"X-Half: \xe6\x97"]
    source_subjects = run(stored_subjects(src, "RAW"))
    assert source_subjects[3] == b"raw.before.caf\xe9"
    for target, prefix in (("RAW", ""), ("RAW_BATCHES", "batches."), ("RAW_LANES", "lanes.")):
        subjects = run(stored_subjects(dst, target))
        want = [prefix.encode() + s for s in source_subjects]
        assert (subjects if target != "RAW_LANES" else sorted(subjects)) == (
            want if target != "RAW_LANES" else sorted(want)
        ), target
        # Each subject once, so subject order keeps no order across them: matched by subject.
        copies = {s: (lines, data) for s, lines, data in run(raw_messages(dst, target))}
        assert sorted(copies) == sorted(prefix + s for s, _, _ in source), target
        if target != "RAW_LANES":
            assert list(copies) == [prefix + s for s, _, _ in source]  # in the source's order
        for subject, src_lines, src_data in source:
            dst_lines, dst_data = copies[prefix + subject]
            assert without_added(dst_lines) == src_lines, target  # the bytes as stored, in order
            assert dst_data == src_data
    # Where nothing is sampled out, the copies are the source's messages, in order (the stored
    # subjects read by direct gets, allowed on PULL now that it is copied).
    run(
        update_stream(
            src, StreamConfig(name="PULL", subjects=["pull.>"], allow_direct=True, num_replicas=replicas)
        )
    )
    for stream, first in (("PULL", slice(None)), ("REG", slice(3))):
        assert run(stored_subjects(dst, stream)) == run(stored_subjects(src, stream))[first], stream
        copies, originals = run(raw_messages(dst, stream)), run(raw_messages(src, stream))[first]
        assert [without_added(lines) for _, lines, _ in copies] == [lines for _, lines, _ in originals]
        assert [d for _, _, d in copies] == [d for _, _, d in originals]
    assert run(stored_subjects(src, "PULL"))[1] == b"pull.before.caf\xe9"
    advs = [json.loads(m.data) for m in run(read_all(src, "ADV"))]
    assert sorted((a["event"], a["value"]) for a in advs) == [
        ("new", "n\ufffdud-1"),
        ("new", "odd-3"),
        ("new", "plain-2"),
    ]


async def publish_atomic_batch(url: str, stream: str, subjects: list[str]) -> None:
    """One atomic batch (nats-server 2.12+, ADR-50): each message with Nats-Batch-Id and
    Nats-Batch-Sequence, the last with Nats-Batch-Commit; the server stores them with those
    headers, all or none."""
    nc = await nats.connect(url.split(","))
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        for i, subject in enumerate(subjects, 1):
            headers = {"Nats-Batch-Id": "batch-1", "Nats-Batch-Sequence": str(i), "X-Own": f"m{i}"}
            if i == len(subjects):
                headers["Nats-Batch-Commit"] = "1"
            await nc.publish(subject, f"atomic {i}".encode(), reply=inbox, headers=headers)
        # Messages before the commit may be answered empty (flow control), the commit with the ack.
        reply = b""
        while not reply:
            reply = (await sub.next_msg(timeout=10)).data
        ack = json.loads(reply)
        assert ack.get("batch") == "batch-1" and ack.get("count") == len(subjects), ack
    finally:
        await nc.close()


def test_a_source_written_in_atomic_batches_is_copied_without_their_batch_headers(
    source_like_target: NatsCluster, target_of_each_kind: tuple[NatsCluster, int], tmp_path: Path
) -> None:
    """A stored message keeps the Nats-Batch-* headers of the atomic batch it came in. On a copy
    they would make the target take it as part of a batch of its own (refused, or staged and
    never committed), so they are not copied, as the server drops them when it sources a
    stream; every other header is."""
    target, replicas = target_of_each_kind
    src, dst = source_like_target.url, target.url
    run(create_stream(src, "ATOM", ["atom.>"], num_replicas=replicas, allow_atomic=True))
    run(publish(src, [("atom.before", b"plain", {"X-Own": "m0"})], stream="ATOM"))
    run(publish_atomic_batch(src, "ATOM", ["atom.a", "atom.b", "atom.c"]))
    run(publish(src, [("atom.after", b"plain", {"X-Own": "m4"})], stream="ATOM"))
    source = run(raw_messages(src, "ATOM"))
    assert [ln for ln in source[1][1] if ln.startswith(b"Nats-Batch-Id")] == [b"Nats-Batch-Id: batch-1"]

    entry = {"stream": "ATOM", "source_url": src, "target_url": dst}  # the target as the source
    rep = start_replicator(write_config(tmp_path / "sr.yaml", "dc1", [entry]))
    try:
        wait_for(lambda: run(count(dst, "ATOM")) >= 5, SLOW_S, "the copies", rep)
        time.sleep(1)
    finally:
        assert rep.stop() == 0, rep.output()
    copies = run(raw_messages(dst, "ATOM"))
    assert [s for s, _, _ in copies] == [s for s, _, _ in source]
    for (_, src_lines, src_data), (_, dst_lines, dst_data) in zip(source, copies, strict=True):
        assert without_added(dst_lines) == [ln for ln in src_lines if not ln.startswith(b"Nats-Batch-")]
        assert dst_data == src_data
