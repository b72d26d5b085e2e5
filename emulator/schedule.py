"""The publish schedule: a pure function of (scenario, seed), produced tick by tick.

A tick scheduler rather than a task per node: per tick, one vectorised scan finds the nodes
due, events are applied at their exact times (ticks are split at event times), and the due
publishes come out sorted by (time, node). A node's slot times come from its own anchor and a
hash of (seed, node, slot), so the result does not depend on tick size or on sharding: shard i
of N yields exactly the full plan's publishes of nodes with `node % N == i`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from emulator.fleet import SALT_BOOT, SALT_JITTER, FleetModel, build_fleet, unit_hash
from emulator.scenario import (
    DownEvent,
    FlapEvent,
    ForceEvent,
    JoinEvent,
    MetadataEvent,
    PartitionEvent,
    RetireEvent,
    Scenario,
    _Selected,
)

MAX_SIZE = 1_000_000


@dataclass(frozen=True)
class Shard:
    """The part of the fleet one emulator process publishes: every count-th node from index,
    of the given data centres only (all when empty)."""

    index: int = 0
    count: int = 1
    data_centres: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`i/N`, 0-based: `0/4` .. `3/4`."""
        try:
            a, b = text.split("/")
            shard = cls(int(a), int(b))
        except ValueError:
            raise ValueError(f"--shard {text!r}: expected i/N, e.g. 0/4 (0-based)") from None
        if shard.count < 1 or not 0 <= shard.index < shard.count:
            raise ValueError(f"--shard {text!r}: need 0 <= i < N, e.g. 0/4 .. 3/4")
        return shard


WHOLE_FLEET = Shard()


@dataclass
class Publishes:
    """Planned publishes of one tick, sorted by (t, node)."""

    t: np.ndarray  # float64 scenario seconds from the start
    node: np.ndarray  # int64
    size: np.ndarray  # int32 payload bytes
    force: np.ndarray  # bool
    uptime: np.ndarray  # float64 seconds since the node booted
    serial: np.ndarray  # int64 the node's n-th publish (0-based)

    def __len__(self) -> int:
        return len(self.t)


@dataclass(order=True)
class _Action:
    at: float
    order: int
    kind: str = ""
    nodes: np.ndarray | None = None
    value: float = 0.0


class Schedule:
    """Iterate `ticks()` once; the state advances as it goes."""

    def __init__(
        self, scenario: Scenario, shard: Shard = WHOLE_FLEET, fleet: FleetModel | None = None
    ) -> None:
        self.s = scenario
        self.shard = shard
        self.fleet = fleet or build_fleet(scenario)
        f, n = self.fleet, self.fleet.total
        self.interval = scenario.fleet.interval
        self.jitter = scenario.fleet.jitter
        self.delay_lo, self.delay_hi = scenario.fleet.startup_delay
        self.active = np.zeros(n, dtype=bool)
        self.active[: f.initial] = True
        self.next_t = np.full(n, np.inf)
        self.next_t[: f.initial] = f.phase[: f.initial]
        self.anchor = self.next_t.copy()
        self.boot_t = np.zeros(n)
        self.boot_t[: f.initial] = -f.uptime0[: f.initial]
        self.slot = np.zeros(n, dtype=np.int64)
        self.boots = np.zeros(n, dtype=np.int64)
        self.serial = np.zeros(n, dtype=np.int64)
        self.down_until = np.zeros(n)
        self.size = f.size.copy()
        self.force = np.zeros(n, dtype=bool)
        self.dc_cut_until = np.zeros(len(f.data_centres))
        self.mine = (np.arange(n) % shard.count) == shard.index
        if shard.data_centres:
            unknown = [d for d in shard.data_centres if d not in f.data_centres]
            if unknown:
                raise ValueError(
                    f"--data-centre {unknown[0]}: not one of the fleet's data centres "
                    f"({', '.join(f.data_centres)})"
                )
            self.mine &= np.isin(f.dc, [f.data_centres.index(d) for d in shard.data_centres])
        self._order = itertools.count()
        self._actions: list[_Action] = []
        joins = iter(f.join_start)
        for i, ev in enumerate(scenario.events):
            nodes = None
            if isinstance(ev, JoinEvent):
                start = next(joins)
                nodes = np.arange(start, start + ev.count)
            self._push(ev.at, "event", nodes, value=i)

    def _push(self, at: float, kind: str, nodes: np.ndarray | None = None, value: float = 0.0) -> None:
        heapq.heappush(self._actions, _Action(at, next(self._order), kind, nodes, value))

    # --- events ------------------------------------------------------------------------------
    def select(self, ev: _Selected, index: int) -> np.ndarray:
        f = self.fleet
        cand = self.active.copy()
        if ev.dc is not None:
            cand &= self.fleet.dc == f.data_centres.index(ev.dc)
        if ev.names is not None:
            ids = f.identities()
            missing = [nm for nm in ev.names if nm not in ids]
            if missing:
                raise ValueError(f"events[{index}].names: no node named {missing[0]!r} in this fleet")
            picked = np.array(sorted(ids[nm] for nm in ev.names), dtype=np.int64)
            return picked[cand[picked]]
        pool = np.flatnonzero(cand)
        if ev.count is None and ev.fraction is None:
            return pool
        k = ev.count if ev.count is not None else round((ev.fraction or 0) * len(pool))
        rng = np.random.default_rng([self.s.seed, 7919, index])
        return np.sort(rng.choice(pool, size=min(k, len(pool)), replace=False))

    def _boot(self, nodes: np.ndarray, at: float) -> None:
        """Nodes (re)start at `at`: they publish after their startup delay, then every interval."""
        u = unit_hash(self.s.seed, SALT_BOOT, nodes, self.boots[nodes])
        self.boots[nodes] += 1
        first = at + self.delay_lo + (self.delay_hi - self.delay_lo) * u
        self.boot_t[nodes] = at
        self.anchor[nodes] = first
        self.next_t[nodes] = first
        self.slot[nodes] = 0

    def _apply(self, a: _Action) -> None:
        if a.kind == "boot":
            assert a.nodes is not None
            nodes = a.nodes[self.active[a.nodes] & (self.down_until[a.nodes] <= a.at)]
            self._boot(nodes, a.at)
            return
        index = int(a.value)
        ev = self.s.events[index]
        if isinstance(ev, JoinEvent):
            assert a.nodes is not None
            self.active[a.nodes] = True
            self._boot(a.nodes, ev.at)
        elif isinstance(ev, PartitionEvent):
            d = self.fleet.data_centres.index(ev.dc)
            self.dc_cut_until[d] = max(self.dc_cut_until[d], ev.at + ev.duration)
        elif isinstance(ev, DownEvent):
            self._down(self.select(ev, index), ev.at, ev.duration)
        elif isinstance(ev, FlapEvent):
            nodes = self.select(ev, index)
            for start in np.arange(ev.at, ev.at + ev.duration, ev.period):
                self._push(float(start), "down", nodes, ev.period / 2)
        elif isinstance(ev, RetireEvent):
            nodes = self.select(ev, index)
            self.active[nodes] = False
            self.next_t[nodes] = np.inf
        elif isinstance(ev, MetadataEvent):
            nodes = self.select(ev, index)
            self.size[nodes] = np.clip(self.size[nodes] + ev.bytes, self.s.fleet.sizes.min, MAX_SIZE)
        elif isinstance(ev, ForceEvent):
            self.force[self.select(ev, index)] = True

    def _down(self, nodes: np.ndarray, at: float, duration: float) -> None:
        nodes = nodes[self.active[nodes]]
        until = np.maximum(self.down_until[nodes], at + duration)
        self.down_until[nodes] = until
        self.next_t[nodes] = np.inf
        for end in np.unique(until):
            self._push(float(end), "boot", nodes[until == end])

    def _apply_action(self, a: _Action) -> None:
        if a.kind == "down":
            assert a.nodes is not None
            self._down(a.nodes, a.at, a.value)
        else:
            self._apply(a)

    # --- ticks -------------------------------------------------------------------------------
    def _slot_time(self, nodes: np.ndarray) -> np.ndarray:
        k = self.slot[nodes]
        j = (unit_hash(self.s.seed, SALT_JITTER, nodes, k) * 2 - 1) * self.jitter
        return self.anchor[nodes] + k * self.interval + np.where(k > 0, j, 0.0)

    def _due(self, end: float) -> Publishes | None:
        parts: list[tuple[np.ndarray, ...]] = []
        while True:
            idx = np.flatnonzero(self.next_t < end)
            if len(idx) == 0:
                break
            t = self.next_t[idx]
            ok = (t >= self.dc_cut_until[self.fleet.dc[idx]]) & self.mine[idx]
            pub = idx[ok]
            if len(pub):
                parts.append(
                    (
                        t[ok],
                        pub,
                        self.size[pub].copy(),
                        self.force[pub].copy(),
                        t[ok] - self.boot_t[pub],
                        self.serial[pub].copy(),
                    )
                )
                self.force[pub] = False
                self.serial[pub] += 1
            self.slot[idx] += 1
            self.next_t[idx] = self._slot_time(idx)
        if not parts:
            return None
        cols = [np.concatenate(c) for c in zip(*parts, strict=True)]
        order = np.lexsort((cols[1], cols[0]))
        return Publishes(*(c[order] for c in cols))

    def ticks(self, tick: float | None = None) -> Iterator[tuple[float, float, Publishes | None]]:
        """(start, end, publishes due in [start, end)) over the scenario's duration. The default
        tick is 1 s of scenario time, or 50 ms of wall time when time runs faster."""
        step = tick or max(1.0, self.s.speedup * 0.05)
        t, stop = 0.0, self.s.duration
        while t < stop:
            end = min(t + step, stop)
            while self._actions and self._actions[0].at < end:
                a = heapq.heappop(self._actions)
                if a.at > t:
                    yield t, a.at, self._due(a.at)
                    t = a.at
                self._apply_action(a)
            yield t, end, self._due(end)
            t = end


def plan(scenario: Scenario, shard: Shard = WHOLE_FLEET, tick: float | None = None) -> Iterator[Publishes]:
    for _, _, p in Schedule(scenario, shard).ticks(tick):
        if p is not None:
            yield p
