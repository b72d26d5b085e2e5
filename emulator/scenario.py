"""The emulator's part of a scenario file: the fleet, its events and the clock, validated.

A scenario file may carry more top-level keys for the scenario runner (`topology`,
`replicator`, `replicators`, `expect`); the emulator reads only what is defined here. Every problem becomes
one line naming the key and the fix (`ScenarioError`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from replicator.durations import parse_duration
from replicator.subjects import subject_problem
from replicator.yaml_files import read_yaml


class ScenarioError(ValueError):
    """A scenario problem, as one line naming the key and the fix."""


def _seconds(v: Any) -> float:
    return parse_duration(v).total_seconds()


Seconds = Annotated[float, BeforeValidator(_seconds)]
"""A duration in the Choria format (30s, 5m, 1h) or a number of seconds, held as seconds."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PayloadSizes(_Strict):
    """Log-normal payload sizes in bytes, clipped to [min, max]."""

    median: int = Field(default=8000, ge=1024)
    sigma: float = Field(default=0.6, ge=0, le=3)
    min: int = Field(default=1024, ge=1024)
    max: int = Field(default=40_000, le=1_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> PayloadSizes:
        if not self.min <= self.median <= self.max:
            raise ValueError(f"need min <= median <= max, got {self.min}, {self.median}, {self.max}")
        return self


class Fleet(_Strict):
    nodes: int = Field(ge=1, le=10_000_000)
    data_centres: list[str] = Field(default_factory=lambda: ["dc1"], min_length=1)
    interval: Seconds = 300.0
    jitter: Seconds = 0.5
    """Each publish lands up to this much before or after its slot."""
    startup_delay: tuple[Seconds, Seconds] = (1.0, 4.0)
    """A node that boots (joins, or recovers from being down) first publishes this long after."""
    subject: str = "choria.stream.input.registration.{identity}"
    domain: str = "example.net"
    sizes: PayloadSizes = Field(default_factory=PayloadSizes)
    force_field: str = "force"

    @model_validator(mode="after")
    def _check(self) -> Fleet:
        if self.interval <= 0:
            raise ValueError("interval must be positive, e.g. 300s")
        if self.jitter * 2 >= self.interval:
            raise ValueError("jitter must be less than half the interval")
        lo, hi = self.startup_delay
        if not 0 <= lo <= hi:
            raise ValueError("startup_delay must be [low, high] with 0 <= low <= high, e.g. [1s, 4s]")
        if "{identity}" not in self.subject:
            raise ValueError(
                "subject must contain {identity}, e.g. choria.stream.input.registration.{identity}"
            )
        if len(set(self.data_centres)) != len(self.data_centres):
            raise ValueError("data_centres must not repeat a name")
        for dc in self.data_centres:
            # Each node publishes to the subject with its identity (node1.<dc>.<domain>) in it.
            subject = self.subject.replace("{identity}", f"node1.{dc}.{self.domain}")
            problem = subject_problem(subject)
            if problem:
                raise ValueError(
                    f"subject {self.subject!r} with data centre {dc!r} and domain {self.domain!r} gives "
                    f"{subject!r}, which {problem}: fix fleet.subject, fleet.data_centres or fleet.domain"
                )
        return self


class _Event(_Strict):
    at: Seconds
    """Scenario time of the event, from the start."""


class _Selected(_Event):
    """Which active nodes an event affects: a count, a fraction, or named nodes; optionally
    only those of one data centre. Counts and fractions are picked reproducibly from the seed."""

    count: int | None = Field(default=None, ge=1)
    fraction: float | None = Field(default=None, gt=0, le=1)
    names: list[str] | None = None
    dc: str | None = None

    @model_validator(mode="after")
    def _one_selector(self) -> _Selected:
        given = [k for k in ("count", "fraction", "names") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give only one of count, fraction, names (got {', '.join(given)})")
        if not given and self.dc is None:
            raise ValueError("say which nodes: count, fraction, names or dc")
        return self


class DownEvent(_Selected):
    """Nodes stop publishing for `duration`, then reboot and publish after their startup delay."""

    type: Literal["down"]
    duration: Seconds


class PartitionEvent(_Event):
    """A data centre's nodes cannot reach the stream for `duration`; they keep their schedule
    and their messages in that window are lost."""

    type: Literal["partition"]
    dc: str
    duration: Seconds


class FlapEvent(_Selected):
    """Nodes go down and come back every `period` (down for the first half) for `duration`."""

    type: Literal["flap"]
    duration: Seconds
    period: Seconds


class RetireEvent(_Selected):
    """Nodes stop publishing for good."""

    type: Literal["retire"]


class JoinEvent(_Event):
    """`count` new nodes boot at `at` (in data centre `dc`, or spread over all)."""

    type: Literal["join"]
    count: int = Field(ge=1)
    dc: str | None = None


class MetadataEvent(_Selected):
    """Nodes' payloads grow (or shrink, when negative) by `bytes` from their next message on."""

    type: Literal["metadata"]
    bytes: int


class ForceEvent(_Selected):
    """Nodes set the force field to true on their next message."""

    type: Literal["force"]


Event = Annotated[
    DownEvent | PartitionEvent | FlapEvent | RetireEvent | JoinEvent | MetadataEvent | ForceEvent,
    Field(discriminator="type"),
]


EVENT_TYPES = ("down", "partition", "flap", "retire", "join", "metadata", "force")


class Scenario(_Strict):
    name: str
    description: str = ""
    seed: int = Field(default=1, ge=0, le=2**64 - 1)
    speedup: float = Field(default=1.0, gt=0)
    """Divides every interval and duration: 60 runs an hour of fleet time in a minute."""
    duration: Seconds
    """Scenario time to run for."""
    fleet: Fleet
    events: list[Event] = Field(default_factory=list)
    # Read by the scenario runner, not by the emulator.
    topology: Any = None
    replicator: Any = None
    replicators: Any = None
    expect: Any = None

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if self.duration <= 0:
            raise ValueError("duration must be positive, e.g. 1h")
        dcs = set(self.fleet.data_centres)
        for i, ev in enumerate(self.events):
            dc = getattr(ev, "dc", None)
            if dc is not None and dc not in dcs:
                raise ValueError(f"events[{i}].dc {dc!r} is not one of fleet.data_centres {sorted(dcs)}")
            if ev.at < 0 or ev.at > self.duration:
                raise ValueError(f"events[{i}].at must be within the scenario duration")
            if isinstance(ev, FlapEvent) and ev.period <= 0:
                raise ValueError(f"events[{i}].period must be positive")
        return self

    def with_overrides(
        self, seed: int | None = None, speedup: float | None = None, duration: str | None = None
    ) -> Scenario:
        data = self.model_dump()
        if seed is not None:
            data["seed"] = seed
        if speedup is not None:
            data["speedup"] = speedup
        if duration is not None:
            data["duration"] = duration
        return parse_scenario(data)

    @property
    def wall_seconds(self) -> float:
        return self.duration / self.speedup


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    # Drop the event type pydantic puts in the location of a union member (events.0.down.at).
    raw = list(first["loc"])
    loc = [p for i, p in enumerate(raw) if not (p in EVENT_TYPES and i > 0 and isinstance(raw[i - 1], int))]
    where = ""
    for p in loc:
        where += f"[{p}]" if isinstance(p, int) else (f".{p}" if where else str(p))
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key: remove it or check its spelling"
    elif first["type"] == "missing":
        msg = "is required"
    elif first["type"] == "union_tag_invalid":
        msg = "unknown event type: use down, partition, flap, retire, join, metadata or force"
    elif first["type"] == "union_tag_not_found":
        msg = "each event needs a type: down, partition, flap, retire, join, metadata or force"
    return f"{where or 'scenario'}: {msg}"


def parse_scenario(data: Any) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("scenario: expected a YAML mapping with name, duration and fleet")
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(_one_line(e)) from None


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        data = read_yaml(p, "scenario file")
    except ValueError as e:
        raise ScenarioError(str(e)) from None
    try:
        return parse_scenario(data)
    except ScenarioError as e:
        raise ScenarioError(f"{p}: {e}") from None
