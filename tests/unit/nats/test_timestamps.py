"""RFC3339Nano parsing of Nats-Time-Stamp."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from replicator.nats.timestamps import rfc3339_to_ns


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)), st.integers(0, 999))
def test_rfc3339_parse_matches_datetime(dt: datetime, nanos: int) -> None:
    dt = dt.replace(tzinfo=UTC)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{dt.microsecond:06d}{nanos:03d}".rstrip("0") + "Z"
    text = text.replace(".Z", "Z")
    want = int(dt.replace(microsecond=0).timestamp()) * 10**9 + dt.microsecond * 1000 + nanos
    assert rfc3339_to_ns(text) == want
