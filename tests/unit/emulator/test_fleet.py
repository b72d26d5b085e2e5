"""The fleet's identities: stable per seed, unique."""

from __future__ import annotations

from typing import Any

from emulator.fleet import build_fleet
from emulator.scenario import parse_scenario


def base(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": "t", "duration": "1h", "fleet": {"nodes": 100}}
    d.update(over)
    return d


def test_identities_are_stable_per_seed_and_unique() -> None:
    a = build_fleet(parse_scenario(base(seed=5)))
    b = build_fleet(parse_scenario(base(seed=5)))
    c = build_fleet(parse_scenario(base(seed=6)))
    assert [a.identity(i) for i in range(100)] == [b.identity(i) for i in range(100)]
    assert [a.identity(i) for i in range(100)] != [c.identity(i) for i in range(100)]
    assert len({a.identity(i) for i in range(100)}) == 100
