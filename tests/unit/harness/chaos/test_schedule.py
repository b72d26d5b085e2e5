"""The campaign's schedules: a seed is a schedule, so a failing one replays."""

from __future__ import annotations

from harness.chaos.schedule import KINDS, Topology, draw, replay_command


def test_a_seed_gives_the_same_schedule_every_time() -> None:
    assert draw(7, 5) == draw(7, 5)
    assert draw(7, 5) != draw(8, 5)


def test_every_kind_of_fault_is_drawn_and_each_fits_the_topology() -> None:
    topo = Topology()
    faults = [f for seed in range(60) for f in draw(seed, 5, topo)]
    assert {f.kind for f in faults} == set(KINDS)
    for f in faults:
        if f.kind == "stall":
            assert f.duration > topo.ttl  # past the election's TTL: the lease is lost
        if f.kind in ("server-kill", "quiet-server-kill"):
            assert f.target in topo.source_servers + topo.target_servers
        if f.kind == "cut":
            assert f.network in ("src", "dst", "both") and f.duration > 0
        if f.kind == "limit":
            assert f.target in topo.limited_targets


def test_a_failing_seed_is_printed_with_the_command_that_replays_it() -> None:
    assert replay_command(12, 5) == "make chaos SEEDS=12 FAULTS=5"
