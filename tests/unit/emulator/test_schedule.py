"""The emulator's schedule and events, checked against hand-computed expectations."""

from __future__ import annotations

import io
import itertools
from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from emulator.planlog import write_plan
from emulator.scenario import parse_scenario
from emulator.schedule import WHOLE_FLEET, Schedule, Shard

INTERVAL = 300.0


def scenario(nodes: int = 2000, duration: str = "30m", events: list[dict[str, Any]] | None = None, **kw: Any):
    fleet = {"nodes": nodes, "data_centres": ["dc1", "dc2"], **kw.pop("fleet", {})}
    return parse_scenario(
        {"name": "t", "seed": 11, "duration": duration, "fleet": fleet, "events": events or [], **kw}
    )


def publishes(s, shard: Shard = WHOLE_FLEET, tick: float | None = None) -> list[tuple[float, int, int, bool]]:
    out = []
    for _, _, p in Schedule(s, shard).ticks(tick):
        if p is not None:
            out += list(zip(p.t.tolist(), p.node.tolist(), p.size.tolist(), p.force.tolist(), strict=True))
    return out


def by_node(rows) -> dict[int, list[tuple[float, int, bool]]]:
    out: dict[int, list[tuple[float, int, bool]]] = defaultdict(list)
    for t, node, size, force in rows:
        out[node].append((t, size, force))
    return out


def plan_text(s, shard: Shard = WHOLE_FLEET) -> str:
    buf = io.StringIO()
    write_plan(Schedule(s, shard), buf)
    return buf.getvalue()


def test_same_seed_same_plan_byte_for_byte_and_another_seed_differs() -> None:
    a, b = plan_text(scenario()), plan_text(scenario())
    assert a == b
    assert a.startswith("t,node,size,force\n") and a.count("\n") > 10_000
    assert plan_text(scenario(seed=12)) != a


def test_plan_does_not_depend_on_tick_size() -> None:
    s = scenario(events=[{"type": "down", "at": "7m", "duration": "3m", "count": 50}])
    assert publishes(s, tick=1.0) == publishes(s, tick=17.0) == publishes(s, tick=0.3)


def test_steady_fleet_publishes_every_interval_with_small_jitter_in_time_order() -> None:
    s = scenario(nodes=500, duration="1h")
    rows = publishes(s)
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    nodes = by_node(rows)
    assert len(nodes) == 500
    for msgs in nodes.values():
        # 12 slots in an hour, 13 when the first lands in the jitter before the end.
        assert len(msgs) == 12 or (len(msgs) == 13 and msgs[0][0] < 1.0)
        gaps = np.diff([t for t, _, _ in msgs])
        assert np.all(np.abs(gaps - INTERVAL) <= 2 * 0.5 + 1e-9)


def test_phases_spread_uniformly_over_the_interval() -> None:
    s = scenario(nodes=20_000, duration="5m")
    firsts = np.array([msgs[0][0] for msgs in by_node(publishes(s)).values()])
    assert len(firsts) == 20_000
    counts, _ = np.histogram(firsts, bins=10, range=(0, INTERVAL))
    # 2,000 expected per bin; 5 sigma of a binomial is ~212.
    assert np.all(np.abs(counts - 2000) < 215), counts


def test_size_distribution_follows_config() -> None:
    s = scenario(nodes=20_000, duration="5m", fleet={"sizes": {"median": 8000, "min": 1500, "max": 40000}})
    sizes = np.array([size for _, _, size, _ in publishes(s)])
    assert abs(np.median(sizes) - 8000) / 8000 < 0.03
    assert sizes.min() >= 1500 and sizes.max() <= 40000
    assert (sizes < 4000).mean() > 0.05 and (sizes > 16000).mean() > 0.05  # a real spread


def test_down_nodes_are_silent_then_reboot_and_publish_after_startup_delay() -> None:
    s = scenario(events=[{"type": "down", "at": "10m", "duration": "5m", "count": 40}])
    sched = Schedule(s)
    chosen = sched.select(s.events[0], 0)
    assert len(chosen) == 40
    nodes = by_node(publishes(s))
    for n in chosen.tolist():
        times = [t for t, _, _ in nodes[n]]
        assert not [t for t in times if 600 <= t < 900 + 1.0]
        after = [t for t in times if t >= 900]
        assert 901.0 <= after[0] <= 904.0  # startup delay 1-4 s after recovery
        assert all(abs(b - a - INTERVAL) <= 1.0 for a, b in itertools.pairwise(after))
    others = [n for n in nodes if n not in set(chosen.tolist())]
    assert all(len(nodes[n]) == 6 for n in others)


def test_partition_loses_a_data_centres_messages_and_keeps_their_schedule() -> None:
    s = scenario(events=[{"type": "partition", "at": "10m", "duration": "7m", "dc": "dc2"}])
    sched = Schedule(s)
    dc2 = set(np.flatnonzero(sched.fleet.dc == 1).tolist())
    rows = publishes(s)
    cut = [r for r in rows if 600 <= r[0] < 1020]
    assert cut and not [r for r in cut if r[1] in dc2]
    nodes = by_node(rows)
    for n in list(dc2)[:50]:
        times = np.array([t for t, _, _ in nodes[n]])
        phase = sched.fleet.phase[n]
        assert np.all(np.abs((times - phase + 150) % INTERVAL - 150) <= 0.5 + 1e-9)  # same slots


def test_flapping_nodes_miss_slots_while_down() -> None:
    s = scenario(
        duration="1h", events=[{"type": "flap", "at": "10m", "duration": "30m", "period": "10m", "count": 20}]
    )
    chosen = Schedule(s).select(s.events[0], 0).tolist()
    nodes = by_node(publishes(s))
    for n in chosen:
        times = [t for t, _, _ in nodes[n]]
        for k in range(3):  # down for the first 5 minutes of each 10-minute period
            start = 600 + k * 600
            assert not [t for t in times if start <= t < start + 300 + 1.0]
            assert [t for t in times if start + 300 < t < start + 600]


def test_retired_nodes_stop_for_good_and_a_fraction_picks_that_share() -> None:
    s = scenario(events=[{"type": "retire", "at": "12m", "fraction": 0.05}])
    chosen = Schedule(s).select(s.events[0], 0).tolist()
    assert len(chosen) == 100
    nodes = by_node(publishes(s))
    assert all(max(t for t, _, _ in nodes[n]) < 720 for n in chosen)


def test_joined_nodes_first_publish_after_startup_delay_in_their_dc() -> None:
    s = scenario(events=[{"type": "join", "at": "5m", "count": 300, "dc": "dc2"}])
    sched = Schedule(s)
    nodes = by_node(publishes(s))
    joined = range(2000, 2300)
    assert all(sched.fleet.dc[n] == 1 for n in joined)
    assert all(sched.fleet.identity(n).endswith(".dc2.example.net") for n in joined)
    for n in joined:
        first = nodes[n][0][0]
        assert 301.0 <= first <= 304.0
        assert len(nodes[n]) == 5  # 301-304 s, then every 300 s until 30m


def test_metadata_change_resizes_from_the_event_on() -> None:
    s = scenario(events=[{"type": "metadata", "at": "10m", "bytes": 2500, "count": 30}])
    chosen = Schedule(s).select(s.events[0], 0).tolist()
    nodes = by_node(publishes(s))
    for n in chosen:
        before = {size for t, size, _ in nodes[n] if t < 600}
        after = {size for t, size, _ in nodes[n] if t >= 600}
        assert len(before) == len(after) == 1
        assert after.pop() - before.pop() == 2500


def test_force_sets_the_flag_on_exactly_the_next_message() -> None:
    s = scenario(events=[{"type": "force", "at": "10m", "count": 25}])
    chosen = set(Schedule(s).select(s.events[0], 0).tolist())
    nodes = by_node(publishes(s))
    for n, msgs in nodes.items():
        forced = [t for t, _, f in msgs if f]
        if n in chosen:
            assert len(forced) == 1 and forced[0] >= 600
            assert forced[0] == min(t for t, _, _ in msgs if t >= 600)
        else:
            assert not forced


def test_named_nodes_and_unknown_names() -> None:
    sched = Schedule(scenario())
    name = sched.fleet.identity(17)
    s = scenario(events=[{"type": "retire", "at": "1m", "names": [name]}])
    assert Schedule(s).select(s.events[0], 0).tolist() == [17]
    bad = scenario(events=[{"type": "retire", "at": "1m", "names": ["nope.example.net"]}])
    with pytest.raises(ValueError, match=r"no node named 'nope\.example\.net'"):
        publishes(bad)


def test_shards_cover_every_node_exactly_once() -> None:
    s = scenario(events=[{"type": "down", "at": "5m", "duration": "5m", "fraction": 0.1},
                         {"type": "join", "at": "3m", "count": 100}])  # fmt: skip
    full = publishes(s)
    parts = [publishes(s, Shard(i, 3)) for i in range(3)]
    node_sets = [{r[1] for r in p} for p in parts]
    assert not (node_sets[0] & node_sets[1]) and not (node_sets[1] & node_sets[2])
    assert set().union(*node_sets) == {r[1] for r in full}
    assert sorted(r for p in parts for r in p) == sorted(full)


def test_data_centre_shards_publish_only_their_nodes_and_together_the_whole_fleet() -> None:
    # The tiered-tree scenario: each city's emulator publishes its own nodes into its own cluster.
    s = scenario(events=[{"type": "partition", "at": "5m", "duration": "5m", "dc": "dc2"},
                         {"type": "join", "at": "3m", "count": 100, "dc": "dc1"}])  # fmt: skip
    fleet = Schedule(s).fleet
    parts = {dc: publishes(s, Shard(data_centres=(dc,))) for dc in ("dc1", "dc2")}
    for dc, rows in parts.items():
        assert rows and {fleet.data_centres[fleet.dc[r[1]]] for r in rows} == {dc}
    assert sorted(parts["dc1"] + parts["dc2"]) == sorted(publishes(s))
    with pytest.raises(ValueError, match="--data-centre dc9: not one of the fleet's data centres"):
        Schedule(s, Shard(data_centres=("dc9",)))


def test_shard_parse_errors() -> None:
    assert Shard.parse("2/4") == Shard(2, 4)
    for bad in ("4/4", "x", "1/0", "-1/2"):
        with pytest.raises(ValueError, match="--shard"):
            Shard.parse(bad)
