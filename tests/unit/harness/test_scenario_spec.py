"""Scenario files: every shipped one validates; bad ones are one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.scenario import ScenarioError
from harness.scenario.spec import load_spec
from harness.scenario.truth import Truth, compare_advisories, compare_copies

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_scenarios_validate(path: Path) -> None:
    spec = load_spec(path)
    hops = spec.hops()
    assert hops
    for _, h in hops:
        assert h.expect.advisories == "exact"
        entry = h.entry("nats://a:4222", "nats://b:4222", spec.scenario.speedup)
        if h.sampling:
            assert h.inspect_duration is not None
            assert entry["inspect_duration"] == f"{h.inspect_duration / spec.scenario.speedup * 1000:.0f}ms"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("replicator: {inspect_feld: sender}", "replicator.inspect_feld: unknown key"),
        ("replicator: {inspect_field: sender}", "replicator.inspect_duration: needed"),
        ("expect: {advisories: most}", "expect.advisories"),
        ("topology: {source_servers: 9}", "topology.source_servers: Input should be less than or equal to 5"),
        (
            "replicator: {inspect_field: s, inspect_duration: 1h, down: [{at: 50m, duration: 1h}]}",
            "must end within",
        ),
        # Each reached a full run before (servers and replicators started), found by a review:
        (
            "replicator: {inspect_field: s, inspect_duration: 1h, warn_duration: 2h}",
            "sr_s's config, as the replicator reads it: streams[0]: warn_duration must be shorter",
        ),
        ("replicator: {inspect_field: s, inspect_duration: 1h, size_trigger: -1}", "streams[0].size_trigger"),
        ("expect: {copy_ratio: [12, 6]}", "expect.copy_ratio: [12.0, 6.0]: give [lowest, highest]"),
        ("expect: {events: {new: [5, 1]}}", "expect.events: new: [5, 1]: give [fewest, most]"),
    ],
)
def test_bad_scenario_files(tmp_path: Path, extra: str, message: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(f"name: s\nduration: 1h\nfleet: {{nodes: 10}}\n{extra}\n")
    with pytest.raises(ScenarioError) as e:
        load_spec(p)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_comparisons_name_what_differs() -> None:
    truth = Truth(
        copied=[1, 2, 3],
        advisories=[("n1", "new", 100), ("n1", "timeout", 200)],
        published=9,
        final_clock_ms=0,
    )
    ok = compare_copies(truth, [1, 2, 3])
    assert ok.ok and not ok.detail
    bad = compare_copies(truth, [1, 3, 3, 4])
    assert not bad.ok and "missing seqs 2" in bad.detail and "doubled seqs 3, 4" in bad.detail
    assert not compare_copies(truth, [2, 1, 3]).ok  # order matters
    assert compare_advisories(
        truth, [("n1", "new", 101), ("n1", "timeout", 200)], "exact"
    ).ok  # 1 s tolerance
    far = compare_advisories(truth, [("n1", "new", 103), ("n1", "timeout", 200)], "exact")
    assert not far.ok and "missing ('n1', 'new', 100)" in far.detail and "('n1', 'new', 103)" in far.detail
    counts = compare_advisories(truth, [("n1", "new", 1)], {"new": 1, "timeout": 1})
    assert not counts.ok


TREE = """name: t
duration: 1h
fleet: {nodes: 10, data_centres: [a, b]}
topology:
  clusters:
    a: {servers: 3, data_centres: [a]}
    b: {data_centres: [b]}
    hub: {}
replicators:
  - name: sr_a
    streams:
      - {name: reg, source: a, target: hub, inspect_field: sender, inspect_duration: 30m}
      - {name: adv, source: a, target: hub, stream: CHORIA_REGISTRATION_ADVISORIES}
  - name: sr_b
    streams:
      - {name: reg, source: b, target: hub}
"""


def test_the_tree_form_orders_hops_by_what_feeds_them(tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_text(TREE)
    spec = load_spec(p)
    levels = [[(proc.name, h.name) for proc, h in level] for level in spec.hop_levels()]
    # The advisory copy reads what the sampled hop advises: it is final only after that hop.
    assert levels == [[("sr_a", "reg"), ("sr_b", "reg")], [("sr_a", "adv")]]
    assert spec.clusters()["a"].servers == 3 and spec.clusters()["hub"].data_centres == []
    shipped = load_spec(ROOT / "scenarios" / "tiered-tree.yaml")
    assert [len(level) for level in shipped.hop_levels()] == [2, 3]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("target: hub}", "target: hq}"), "replicators[1].streams[0].target: 'hq' is not a cluster"),
        (
            ("b: {data_centres: [b]}", "b: {}"),
            "every data centre of the fleet publishes into exactly one cluster",
        ),
        (("stream: CHORIA_REGISTRATION_ADVISORIES", "stream: NOPE"), "nothing feeds NOPE on a"),
        (
            ("      - {name: adv", "      - {name: reg"),
            "replicators[0].streams: each stream needs its own name",
        ),
        (
            ("inspect_duration: 30m}", "inspect_duration: 30m, speed: 1}"),
            "replicators[0].streams[0].speed: unknown key",
        ),
        (
            ("name: t\n", "name: t\nreplicator: {inspect_field: s, inspect_duration: 1h}\n"),
            "put them under replicators",
        ),
    ],
)
def test_bad_tree_files(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    p = tmp_path / "t.yaml"
    assert change[0] in TREE
    p.write_text(TREE.replace(*change))
    with pytest.raises(ScenarioError) as e:
        load_spec(p)
    assert message in str(e.value) and "\n" not in str(e.value)
