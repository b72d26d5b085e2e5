"""Fleet scenario files: validation with one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emulator.scenario import ScenarioError, load_scenario, parse_scenario


def base(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": "t", "duration": "1h", "fleet": {"nodes": 100}}
    d.update(over)
    return d


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
        (base(seed=-3), "seed: Input should be greater than or equal to 0"),
        (
            base(fleet={"nodes": 5, "data_centres": ["dc 1"]}),
            "registration.node1.dc 1.example.net', which holds whitespace",
        ),
        (base(fleet={"nodes": 5, "data_centres": [""]}), "which has an empty token"),
        (base(fleet={"nodes": 5, "domain": "*"}), "which holds a wildcard"),
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
    with pytest.raises(ScenarioError, match=r"s.yaml: line 3: not valid YAML"):
        load_scenario(p)
    with pytest.raises(ScenarioError, match="cannot read scenario file"):
        load_scenario(tmp_path / "missing.yaml")


def test_overrides_are_validated_too() -> None:
    s = parse_scenario(base())
    assert s.with_overrides(seed=9, speedup=60, duration="10m").wall_seconds == 10
    with pytest.raises(ScenarioError, match="speedup"):
        s.with_overrides(speedup=-1)
