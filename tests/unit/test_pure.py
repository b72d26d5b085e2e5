"""Pure logic, no servers: durations, subjects, headers, timestamps, URLs, ranges, config."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client

from replicator.config import ConfigError, parse_config
from replicator.durations import parse_duration
from replicator.headers import format_source_header, message_id, parse_source_header
from replicator.nats.connect import FastHeaderClient, connect_options
from replicator.nats.timestamps import rfc3339_to_ns
from replicator.nats.urls import parse_nats_url
from replicator.spark.datasource import split_range
from replicator.subjects import rewrite_subject


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1h", 3600),
        ("90s", 90),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("1M", 2592000),
        ("1Y", 31536000),
        ("500ms", 0.5),
        (45, 45),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("bad", ["", "3x", "h", "1h 2m", "-1s", "1.h"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("subject", "prefix", "remove", "want"),
    [
        ("NODE_DATA.host", "FLEET_NODES", "NODE_DATA", "FLEET_NODES.host"),
        ("a.b", "", "", "a.b"),
        ("a.b", "p", "", "p.a.b"),
        ("choria.stream.input.registration.n1", "fleet", "choria.stream.input", "fleet.registration.n1"),
        ("x.REM.y.REM", "", "REM", "x.y"),
    ],
)
def test_subject_rewrite(subject: str, prefix: str, remove: str, want: str) -> None:
    assert rewrite_subject(subject, prefix, remove) == want


def test_source_header_round_trip() -> None:
    v = format_source_header("ORDERS", 42, "dc1", "nodes", 1700000000123)
    assert v == "ORDERS 42 dc1 nodes 1700000000123"
    mark = parse_source_header(v)
    assert mark is not None and (mark.stream, mark.sequence, mark.replicator, mark.config_name) == (
        "ORDERS",
        42,
        "dc1",
        "nodes",
    )
    assert parse_source_header("garbage") is None and parse_source_header(None) is None
    assert message_id("dc1.nodes.ORDERS.17", 5) == "dc1.nodes.ORDERS.17:5"


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)), st.integers(0, 999))
def test_rfc3339_parse_matches_datetime(dt: datetime, nanos: int) -> None:
    dt = dt.replace(tzinfo=UTC)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{dt.microsecond:06d}{nanos:03d}".rstrip("0") + "Z"
    text = text.replace(".Z", "Z")
    want = int(dt.replace(microsecond=0).timestamp()) * 10**9 + dt.microsecond * 1000 + nanos
    assert rfc3339_to_ns(text) == want


@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9\-]{0,20}", fullmatch=True), st.text(max_size=30), max_size=6
    )
)
def test_fast_header_parser_equals_nats_py(headers: dict[str, str]) -> None:
    raw = b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items() if "\r" not in v and "\n" not in v)
    raw += b"Bad Name: x\r\n\x1cX: y\r\nNoColon\r\n\r\n"
    assert FastHeaderClient._parse_header_lines(raw) == Client._parse_header_lines(raw)


def test_urls() -> None:
    u = parse_nats_url("nats://bob:s%40cret@a:4223,b?connect_timeout=3&insecure=true&credentials=/x.creds")
    assert u.servers == ["nats://a:4223", "nats://b:4222"]
    assert (u.user, u.password, u.connect_timeout, u.insecure, u.credentials) == (
        "bob",
        "s@cret",
        3.0,
        True,
        "/x.creds",
    )
    opts = connect_options("nats://a?jwt=/j&nkey=/n")
    assert opts["user_credentials"] == ("/j", "/n")
    for bad, msg in [
        ("", "empty URL"),
        ("http://a", "unsupported scheme"),
        ("nats://a?foo=1", "unknown URL option"),
        ("nats://a?jwt=/j", "together"),
        ("nats://a:port", "bad port"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_nats_url(bad)


@given(st.integers(1, 10**9), st.integers(0, 50_000), st.integers(1, 8), st.integers(1, 5000))
def test_split_range_covers_in_order(start: int, n: int, par: int, min_size: int) -> None:
    parts = split_range(start, start + n, par, min_size)
    covered = [(p.start, p.end) for p in parts]
    assert len(parts) <= par
    if n == 0:
        assert parts == []
        return
    assert covered[0][0] == start and covered[-1][1] == start + n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))


BASE = {"name": "dc1", "streams": [{"stream": "S", "source_url": "nats://a", "target_url": "nats://b"}]}


def test_config_defaults_follow_choria() -> None:
    cfg = parse_config(BASE)
    s = cfg.streams[0]
    assert (s.name, s.target_stream) == ("dc1", "S")
    cfg = parse_config(
        {**BASE, "streams": [{**BASE["streams"][0], "inspect_field": "sender", "inspect_duration": "1h"}]}
    )
    assert cfg.streams[0].warn_duration == timedelta(minutes=30)


def test_config_start_time_and_duplicates() -> None:
    s = {**BASE["streams"][0], "start_time": "2024-01-02T15:04:05Z"}
    assert parse_config({**BASE, "streams": [s]}).streams[0].start_time == datetime(
        2024, 1, 2, 15, 4, 5, tzinfo=UTC
    )
    with pytest.raises(ConfigError, match="duplicate stream configuration name"):
        parse_config({**BASE, "streams": [BASE["streams"][0], BASE["streams"][0]]})
    with pytest.raises(ConfigError, match="only one inspection mode"):
        parse_config(
            {
                **BASE,
                "streams": [
                    {
                        **BASE["streams"][0],
                        "inspect_field": "a",
                        "inspect_header": "b",
                        "inspect_duration": "1h",
                    }
                ],
            }
        )
    with pytest.raises(ConfigError, match="warn_duration must be shorter"):
        parse_config(
            {
                **BASE,
                "streams": [
                    {
                        **BASE["streams"][0],
                        "inspect_field": "a",
                        "inspect_duration": "1h",
                        "warn_duration": "2h",
                    }
                ],
            }
        )
    with pytest.raises(ConfigError, match="leader_election_name is not supported"):
        parse_config({**BASE, "streams": [{**BASE["streams"][0], "leader_election_name": "x"}]})
