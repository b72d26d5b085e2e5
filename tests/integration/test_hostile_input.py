"""Hostile input, end to end on real servers: header values with control bytes, subjects of
many tokens, a message at the server's max_payload, and on a sampled stream payloads of 10 MB,
non-JSON and senders whose names are not subject tokens. Each copy is compared with its source
as the server stores both (raw header lines, subject, data), not through our own parser."""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from helpers import SLOW_S, create_stream, publish_raw, run, start_replicator, wait_for, write_config

from harness.localnats import NatsCluster
from harness.process import entry_state
from harness.servers import nats_cluster
from harness.streams import count_messages as count
from harness.streams import read_all
from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.wire import first_value
from replicator.sampling.rules import SamplingParams

from .test_sampling import expected, sampling_stream

pytestmark = pytest.mark.integration

MB = 1024 * 1024
# Headers the replicator adds to a copy; everything else must be the source's, byte for byte.
ADDED = {SOURCE_HEADER.lower(), "nats-msg-id", "nats-expected-last-msg-id"}


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
    nc = await nats.connect(url, max_reconnect_attempts=1)
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
