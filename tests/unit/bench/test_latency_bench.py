"""The latency bench's arithmetic: a copy's latency from the servers' own timestamps, and the
order check that must hold while it is measured."""

from __future__ import annotations

import math

from bench.latency_bench import latencies_ms, order_check, summary
from replicator.headers import SOURCE_HEADER, format_source_header
from replicator.nats.readers import RawMessage


def _copy(seq: int, kind: str, source_ms: int, target_ms: float) -> RawMessage:
    header = format_source_header("LIVE", seq, "lat", "LIVE", source_ms)
    return RawMessage(seq, f"reg.{kind}.{seq}", int(target_ms * 1e6), [(SOURCE_HEADER, header)], b"{}")


def test_latency_is_target_timestamp_minus_source_timestamp_per_kind() -> None:
    copies = [
        _copy(1, "warm", 1_000, 1_050.5),
        _copy(2, "trickle", 2_000, 2_040),
        _copy(3, "drain", 3_000, 3_900),
    ]
    assert latencies_ms(copies) == {"warm": [50.5], "trickle": [40.0], "drain": [900.0]}


def test_order_is_intact_only_for_each_source_sequence_once_in_order() -> None:
    ok = [_copy(i, "trickle", 0, 1) for i in (1, 2, 3)]
    assert order_check(ok, 3) == "intact"
    assert order_check([ok[0], ok[2], ok[1]], 3).startswith("BROKEN")
    assert order_check([ok[0], ok[1], ok[1], ok[2]], 3) == "BROKEN: 4 copies of 3, 1 duplicated"
    assert order_check(ok[:2], 3).startswith("BROKEN: 2 copies of 3")


def test_summary_percentiles() -> None:
    s = summary([float(x) for x in range(1, 101)])
    assert s["n"] == 100 and s["max"] == 100 and 50 <= s["p50"] <= 51 and 99 <= s["p99"] <= 100
    assert math.isnan(summary([1.0])["p50"])
