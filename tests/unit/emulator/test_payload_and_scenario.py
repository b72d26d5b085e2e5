"""Registration records and scenario validation: no servers needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulator.fleet import build_fleet
from emulator.payload import CONTENT_PROTOCOL, PayloadFactory
from emulator.scenario import ScenarioError, load_scenario, parse_scenario


def base(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": "t", "duration": "1h", "fleet": {"nodes": 100}}
    d.update(over)
    return d


def test_record_is_choria_shaped_json_of_exactly_the_planned_size() -> None:
    s = parse_scenario(base())
    fleet = build_fleet(s)
    f = PayloadFactory(fleet, s.fleet.sizes.min)
    for node in range(100):
        for size in (1024, 5000, int(fleet.size[node]), 40_000):
            raw = f.render(node, size, node % 7 == 0, 1_763_840_000, 86_400 + node, 2**100 + node)
            assert len(raw) == size
            rec = json.loads(raw)
            assert set(rec) == {"protocol", "sender", "time", "requestid", "force", "data"}
            assert rec["sender"] == fleet.identity(node)
            assert rec["force"] is (node % 7 == 0)
            assert rec["time"] == 1_763_840_000
            content = rec["data"]["content"]
            assert rec["data"]["protocol"] == CONTENT_PROTOCOL
            assert {"agents", "classes", "facts", "status", "collectives", "build_info"} <= set(content)
            assert content["facts"]["fqdn"] == fleet.identity(node)
            assert content["status"]["uptime"] == 86_400 + node


def test_a_node_record_changes_only_in_time_uptime_and_request_between_publishes() -> None:
    s = parse_scenario(base())
    fleet = build_fleet(s)
    f = PayloadFactory(fleet, s.fleet.sizes.min)
    a = json.loads(f.render(3, 6000, False, 1000000000, 10, 1))
    b = json.loads(f.render(3, 6000, False, 1000000300, 310, 2))
    fillers = []
    for rec in (a, b):
        rec.pop("time"), rec.pop("requestid")
        rec["data"]["content"]["facts"].pop("uptime_seconds")
        rec["data"]["content"]["status"].pop("uptime")
        fillers.append(rec["data"]["content"]["facts"].pop("inventory"))
    assert a == b
    # The filler absorbs uptime's extra digits (twice: facts and status) to keep the size exact.
    assert fillers[0][: len(fillers[1])] == fillers[1] and len(fillers[0]) - len(fillers[1]) == 2


def test_identities_are_stable_per_seed_and_unique() -> None:
    a = build_fleet(parse_scenario(base(seed=5)))
    b = build_fleet(parse_scenario(base(seed=5)))
    c = build_fleet(parse_scenario(base(seed=6)))
    assert [a.identity(i) for i in range(100)] == [b.identity(i) for i in range(100)]
    assert [a.identity(i) for i in range(100)] != [c.identity(i) for i in range(100)]
    assert len({a.identity(i) for i in range(100)}) == 100


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (base(fleet={"nodes": 0}), "fleet.nodes: Input should be greater than or equal to 1"),
        (base(fleet={"nodes": 5, "colour": 1}), "fleet.colour: unknown key"),
        (base(duration="soon"), "duration: invalid duration 'soon'"),
        (base(events=[{"type": "explode", "at": "1m"}]), "events[0]: unknown event type"),
        (base(events=[{"at": "1m"}]), "events[0]: each event needs a type"),
        (base(events=[{"type": "down", "at": "1m", "count": 3}]), "events[0].duration: is required"),
        (base(events=[{"type": "retire", "at": "1m"}]), "say which nodes: count, fraction, names or dc"),
        (base(events=[{"type": "retire", "at": "1m", "count": 2, "fraction": 0.5}]), "only one of count"),
        (base(events=[{"type": "partition", "at": "1m", "duration": "1m", "dc": "mars"}]), "is not one of"),
        (base(events=[{"type": "retire", "at": "2h", "count": 1}]), "events[0].at must be within"),
        (base(fleet={"nodes": 5, "subject": "reg.x"}), "subject must contain {identity}"),
        (base(fleet={"nodes": 5, "sizes": {"median": 500}}), "greater than or equal to 1024"),
        (base(speedup=0), "speedup: Input should be greater than 0"),
        ([1, 2], "expected a YAML mapping"),
    ],
)
def test_bad_scenarios_are_one_line_errors_naming_the_key(data: Any, message: str) -> None:
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_load_scenario_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("name: x\nduration: 1h\nfleet: {nodes: [}\n")
    with pytest.raises(ScenarioError, match=r"s.yaml: not valid YAML"):
        load_scenario(p)
    with pytest.raises(ScenarioError, match="cannot read scenario file"):
        load_scenario(tmp_path / "missing.yaml")


def test_overrides_are_validated_too() -> None:
    s = parse_scenario(base())
    assert s.with_overrides(seed=9, speedup=60, duration="10m").wall_seconds == 10
    with pytest.raises(ScenarioError, match="speedup"):
        s.with_overrides(speedup=-1)
