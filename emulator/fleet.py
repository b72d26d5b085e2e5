"""The fleet's static model: every node's identity, data centre, payload size and profile.

Held as numpy arrays (one entry per node, including nodes that join later) so a million nodes
cost tens of megabytes. Everything is drawn from the scenario's seed, for the whole fleet at
once, so a shard sees exactly the same nodes as the full fleet does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from faker import Faker

from emulator.scenario import JoinEvent, Scenario

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised: a fast, well-spread hash of uint64 values."""
    x = x.astype(np.uint64, copy=True)
    x += np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def unit_hash(seed: int, salt: int, node: np.ndarray, counter: np.ndarray | int) -> np.ndarray:
    """A reproducible uniform [0, 1) per (seed, salt, node, counter): the same value whatever
    order nodes are processed in, so sharding and tick size cannot change a node's schedule."""
    n = np.asarray(node, dtype=np.uint64)
    c = np.broadcast_to(np.asarray(counter, dtype=np.uint64), n.shape)
    h = mix64(n * np.uint64(0xD6E8FEB86659FD93) ^ mix64(c + np.uint64(salt) * np.uint64(0x1000193)))
    h = mix64(h ^ np.uint64(seed & 0xFFFFFFFFFFFFFFFF))
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


# Salts separating the hash streams.
SALT_JITTER, SALT_BOOT, SALT_REQUEST = 1, 2, 3


@dataclass
class FleetModel:
    seed: int
    domain: str
    data_centres: list[str]
    initial: int
    """Nodes 0..initial-1 run from the start; the rest join through join events, in order."""
    dc: np.ndarray  # int16 index into data_centres
    size: np.ndarray  # int32 payload size in bytes
    profile: np.ndarray  # int16 payload profile
    phase: np.ndarray  # float64 first publish of the initial nodes, uniform over the interval
    uptime0: np.ndarray  # float64 seconds the initial nodes have been up at the start
    join_start: list[int]
    """Index of the first node of each join event, in the order of the scenario's events."""
    roles: list[str]

    @property
    def total(self) -> int:
        return len(self.dc)

    def __post_init__(self) -> None:
        # Suffix per node as a plain list: per-message numpy indexing is slow.
        suffixes = [f".{dc}.{self.domain}" for dc in self.data_centres]
        self._suffix = [suffixes[d] for d in self.dc.tolist()]

    def identity(self, node: int) -> str:
        return f"{self.roles[node % len(self.roles)]}-{node:07d}{self._suffix[node]}"

    def max_identity_len(self) -> int:
        digits = max(7, len(str(self.total - 1)))
        return (
            max(map(len, self.roles))
            + 1
            + digits
            + 1
            + max(map(len, self.data_centres))
            + 1
            + len(self.domain)
        )

    def identities(self) -> dict[str, int]:
        return {self.identity(i): i for i in range(self.total)}


PROFILES = 64


def build_fleet(s: Scenario) -> FleetModel:
    f = s.fleet
    rng = np.random.default_rng(s.seed)
    joins = [ev for ev in s.events if isinstance(ev, JoinEvent)]
    total = f.nodes + sum(ev.count for ev in joins)
    n_dc = len(f.data_centres)
    dc = rng.integers(0, n_dc, size=total, dtype=np.int16)
    join_start: list[int] = []
    start = f.nodes
    for ev in joins:
        join_start.append(start)
        if ev.dc is not None:
            dc[start : start + ev.count] = f.data_centres.index(ev.dc)
        start += ev.count
    z = rng.standard_normal(total)
    size = np.clip(np.round(f.sizes.median * np.exp(f.sizes.sigma * z)), f.sizes.min, f.sizes.max)
    profile = rng.integers(0, PROFILES, size=total, dtype=np.int16)
    phase = rng.random(total) * f.interval
    uptime0 = rng.random(total) * 30 * 86400
    fake = Faker()
    fake.seed_instance(s.seed)
    roles = sorted({fake.unique.word().lower() for _ in range(48)})
    return FleetModel(
        seed=s.seed,
        domain=f.domain,
        data_centres=list(f.data_centres),
        initial=f.nodes,
        dc=dc,
        size=size.astype(np.int32),
        profile=profile,
        phase=phase,
        uptime0=uptime0,
        join_start=join_start,
        roles=roles,
    )
