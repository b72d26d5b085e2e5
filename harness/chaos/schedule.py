"""A fault schedule drawn from a seed: which faults, on what, for how long, one after another.
Pure: the same seed gives the same schedule, so a failing seed replays."""

from __future__ import annotations

import random
from dataclasses import dataclass

# What the nemesis can do (harness.chaos.nemesis carries each out).
KINDS = (
    "kill9",  # a replicator's process group killed with SIGKILL, restarted after `duration`
    "stall",  # a replicator frozen (SIGSTOP) for `duration`, longer than the election's TTL
    "term",  # a replicator stopped cleanly (SIGTERM), restarted after `duration`
    "server-kill",  # a nats-server killed with SIGKILL, restarted after `duration`
    "quiet-server-kill",  # the fleet silent past the target's duplicate window, then server-kill
    "stepdown",  # a stream's leader asked to step down
    "cut",  # a replicator's host cut off from the source, the target or both networks
    "slow",  # a replicator's host on a slow link (token bucket) for `duration`
    "limit",  # a target stream's max_msg_size lowered under the copies' size: every copy refused
    "delete",  # messages deleted from a source stream, some of them not yet copied
)


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str  # a replicator's role (leader, standby), a server, a stream or a network
    duration: float  # seconds the fault lasts (0: instantaneous)
    gap: float  # seconds of calm before it
    network: str = ""  # cut: src, dst or both

    def describe(self) -> str:
        where = f"{self.target}" + (f" from {self.network}" if self.network else "")
        return f"{self.kind} {where}" + (f" for {self.duration:.1f}s" if self.duration else "")


@dataclass(frozen=True)
class Topology:
    """What the schedule's faults can name."""

    source_servers: tuple[str, ...] = ("s0", "s1", "s2")
    target_servers: tuple[str, ...] = ("t0", "t1", "t2")
    source_streams: tuple[str, ...] = ("REG", "REG_LIM")
    target_streams: tuple[str, ...] = ("REG_COPY", "REG_PLAIN", "REG_LANES", "REG_SAMPLED")
    limited_targets: tuple[str, ...] = ("REG_COPY", "REG_LANES")
    ttl: float = 4.0  # the election bucket's
    duplicate_window: float = 5.0  # the target streams'


def draw(seed: int, faults: int, topo: Topology = Topology()) -> list[Fault]:
    """`faults` faults, each kind as likely as any other."""
    rng = random.Random(seed)
    out: list[Fault] = []
    for _ in range(faults):
        kind = rng.choice(KINDS)
        gap = round(rng.uniform(1, 4), 1)
        role = "leader" if rng.random() < 0.7 else "standby"
        if kind == "kill9":
            out.append(Fault(kind, role, round(rng.uniform(1, 6), 1), gap))
        elif kind == "stall":
            out.append(Fault(kind, role, round(topo.ttl + rng.uniform(0.5, 4), 1), gap))
        elif kind == "term":
            out.append(Fault(kind, role, round(rng.uniform(1, 4), 1), gap))
        elif kind in ("server-kill", "quiet-server-kill"):
            server = rng.choice(topo.source_servers + topo.target_servers)
            out.append(Fault(kind, server, round(rng.uniform(2, 8), 1), gap))
        elif kind == "stepdown":
            out.append(Fault(kind, rng.choice(topo.source_streams + topo.target_streams), 0, gap))
        elif kind == "cut":
            network = rng.choice(("src", "dst", "both"))
            out.append(Fault(kind, role, round(rng.uniform(2, 10), 1), gap, network))
        elif kind == "slow":
            out.append(Fault(kind, role, round(rng.uniform(3, 8), 1), gap))
        elif kind == "limit":
            out.append(Fault(kind, rng.choice(topo.limited_targets), round(rng.uniform(2, 6), 1), gap))
        else:
            out.append(Fault(kind, "REG_LIM", 0, gap))
    return out


def replay_command(seed: int, faults: int) -> str:
    return f"make chaos SEEDS={seed} FAULTS={faults}"
