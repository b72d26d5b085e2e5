"""A scenario file: the emulator's fleet, events and clock, plus the topology, the replicator
(in the Choria format, durations in scenario time) and what must come out. Validated; every
problem is one line naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from emulator.scenario import Scenario, ScenarioError, Seconds, parse_scenario
from replicator.sampling.rules import Event
from replicator.yaml_files import read_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A nats-server size: digits and a unit.
StoreSize = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]*(MB|GB|TB)$")]


class ClusterSpec(_Strict):
    """A NATS cluster of the topology (3 servers: a JetStream cluster with routes)."""

    servers: int = Field(default=1, ge=1, le=5)
    data_centres: list[str] = Field(default_factory=list)
    """The fleet's data centres whose nodes publish into this cluster's `stream`."""
    stream: str = "CHORIA_REGISTRATION"
    max_file_store: StoreSize = "8GB"
    """JetStream file storage of each of its servers (local runs)."""


class Topology(_Strict):
    """Either the one-hop form (a data centre and a central cluster, `source_servers` and
    `target_servers`) or named `clusters` with `replicators:` between them."""

    source_servers: int = Field(default=3, ge=1, le=5)
    """The data centre: a JetStream cluster with routes."""
    target_servers: int = Field(default=1, ge=1, le=5)
    stream: str = "CHORIA_REGISTRATION"
    target_stream: str = ""
    advisory_stream: str = "CHORIA_REGISTRATION_ADVISORIES"
    max_file_store: StoreSize = "8GB"
    """JetStream file storage of each server of the one-hop form (local runs)."""
    clusters: dict[str, ClusterSpec] | None = None
    spark_workers: int = Field(default=0, ge=0, le=16)
    """The scale test's Spark workers: at least this many (0: as many as its load needs)."""


class Outage(_Strict):
    at: Seconds
    duration: Seconds
    kill: bool = False
    """Ended by kill -9 of the replicator's process group (JVM and workers too), mid-batch
    wherever it is, instead of a clean stop."""


class SamplingSpec(_Strict):
    """The sampling keys of a stream entry of the replicator's config (Choria format), in
    scenario time."""

    inspect_field: str = ""
    inspect_header: str = ""
    inspect_subject_token: int = 0
    inspect_duration: Seconds | None = None
    warn_duration: Seconds | None = None
    size_trigger: float = 0
    inspect_force_field: str = ""
    advisory_subject: str = "choria.registration.advisories.%s.%v"
    reliable: bool = True

    @property
    def sampling(self) -> bool:
        return bool(self.inspect_field or self.inspect_header or self.inspect_subject_token)


class ReplicatorSpec(SamplingSpec):
    """The one-hop form's replicator (its URLs and streams come from the topology)."""

    down: list[Outage] = Field(default_factory=list)
    """Windows (scenario time) in which the replicator is stopped."""
    instances: int = Field(default=1, ge=1, le=4)
    """Replicators run with the same config and leader election (see ProcessSpec)."""


class Expect(_Strict):
    copy_ratio: tuple[float, float] | None = None
    """Bounds of published / copied."""
    copies: Literal["exact"] = "exact"
    advisories: Literal["exact"] | dict[Event, int] = "exact"

    @field_validator("copy_ratio")
    @classmethod
    def _ratio(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not 0 < v[0] <= v[1]:
            raise ValueError(f"{list(v)}: give [lowest, highest], each above 0, e.g. [6, 12]")
        return v

    """exact: every advisory the rules give, no other; or counts per event."""
    events: dict[Event, tuple[int, int]] = Field(default_factory=dict)
    """Bounds on the number of advisories of each event (what the scenario is about)."""

    @field_validator("events")
    @classmethod
    def _bounds(cls, v: dict[Event, tuple[int, int]]) -> dict[Event, tuple[int, int]]:
        for event, (lo, hi) in v.items():
            if not 0 <= lo <= hi:
                raise ValueError(f"{event}: [{lo}, {hi}]: give [fewest, most], from 0 up, e.g. [1, 5]")
        return v

    max_final_lag: int = 0
    max_lag: int | None = None
    """Messages the replicator may fall behind at most, in any second of the run."""
    max_lag_seconds: float | None = None
    """Seconds the copy may trail its source at most (how long ago the oldest source message not
    yet processed was stored), in every minute of the fleet's run after `lag_settle_seconds`."""
    lag_settle_seconds: float = Field(default=35, ge=0)
    """The start of the fleet's run that max_lag_seconds leaves out (queries' first batches)."""
    min_rate: float = 0
    """Messages per second the replicator must have processed while the fleet published."""


class HopSpec(SamplingSpec):
    """One stream entry of a replicator: `stream` on cluster `source` copied (and sampled) to
    `target_stream` on cluster `target`; advisories go to `advisory_stream` on the source."""

    name: str
    source: str
    target: str
    stream: str = "CHORIA_REGISTRATION"
    target_stream: str = ""
    advisory_stream: str = "CHORIA_REGISTRATION_ADVISORIES"
    expect: Expect = Field(default_factory=Expect)

    @property
    def target_name(self) -> str:
        return self.target_stream or self.stream

    filter_subject: str = ""

    def entry(self, source_url: str, target_url: str, speedup: float, candidate: str = "") -> dict[str, Any]:
        """The Choria-format stream entry, durations compressed by the speedup; `candidate`:
        its leader_election_name."""
        entry: dict[str, Any] = {
            "name": self.name,
            "stream": self.stream,
            "target_stream": self.target_name,
            "source_url": source_url,
            "target_url": target_url,
        }
        if self.filter_subject:
            entry["filter_subject"] = self.filter_subject
        if candidate:
            entry["leader_election_name"] = candidate
        if self.sampling:
            for key in ("inspect_field", "inspect_header", "inspect_subject_token", "inspect_force_field"):
                if getattr(self, key):
                    entry[key] = getattr(self, key)
            assert self.inspect_duration is not None
            entry["inspect_duration"] = f"{self.inspect_duration / speedup * 1000:.0f}ms"
            if self.warn_duration is not None:
                entry["warn_duration"] = f"{self.warn_duration / speedup * 1000:.0f}ms"
            if self.size_trigger:
                entry["size_trigger"] = self.size_trigger
            entry["advisory"] = {"subject": self.advisory_subject, "reliable": self.reliable}
        return entry


class ProcessSpec(_Strict):
    """One replicator process (`stream-replicator run`) and the streams its config lists."""

    name: str
    streams: list[HopSpec] = Field(min_length=1)
    down: list[Outage] = Field(default_factory=list)
    """Windows (scenario time) in which this replicator is stopped."""
    instances: int = Field(default=1, ge=1, le=4)
    """More than 1: that many processes with this config, each entry leader-elected (candidate
    `<name>-<i>`), sharing one state_store; an outage then stops or kills whichever instance
    leads the first stream entry at that moment, and it comes back as a standby."""


class ScenarioSpec(_Strict):
    scenario: Scenario
    topology: Topology
    replicator: ReplicatorSpec
    expect: Expect
    replicators: list[ProcessSpec] = Field(default_factory=list)
    path: Path | None = None

    @model_validator(mode="after")
    def _check(self) -> ScenarioSpec:
        if self.topology.clusters is not None:
            self._check_tree()
        else:
            self._check_one_hop()
        self._check_entries()
        return self

    def _check_entries(self) -> None:
        """Each replicator's config as the replicator reads it: a value it refuses is refused
        here, before servers start, not after a run's set-up."""
        from replicator.config import ConfigError, parse_config

        for p in self.processes():
            entries = [
                h.entry(f"nats://{h.source}:4222", f"nats://{h.target}:4222", self.scenario.speedup)
                for h in p.streams
            ]
            try:
                parse_config({"name": p.name, "streams": entries})
            except ConfigError as e:
                raise ValueError(f"{p.name}'s config, as the replicator reads it: {e}") from None

    def _check_one_hop(self) -> None:
        if self.replicators:
            raise ValueError("replicators: needs topology.clusters to name the clusters they join")
        r = self.replicator
        if r.sampling and r.inspect_duration is None:
            raise ValueError("replicator.inspect_duration: needed with an inspection key, e.g. 1h")
        for o in r.down:
            if o.at + o.duration > self.scenario.duration:
                raise ValueError("replicator.down: an outage must end within the scenario duration")

    def _check_tree(self) -> None:
        clusters = self.topology.clusters or {}
        if not self.replicators:
            raise ValueError("replicators: list the replicators between topology.clusters")
        if self.replicator != ReplicatorSpec() or self.expect != Expect():
            raise ValueError(
                "replicator/expect: with topology.clusters put them under replicators[].streams[]"
            )
        fleet_dcs = self.scenario.fleet.data_centres
        placed: list[str] = []
        for name, c in clusters.items():
            for dc in c.data_centres:
                if dc not in fleet_dcs:
                    raise ValueError(
                        f"topology.clusters.{name}.data_centres: {dc!r} is not one of the fleet's "
                        f"data centres ({', '.join(fleet_dcs)})"
                    )
            placed += c.data_centres
        missing = [dc for dc in fleet_dcs if dc not in placed]
        if missing or len(placed) != len(set(placed)):
            raise ValueError(
                "topology.clusters: every data centre of the fleet publishes into exactly one "
                f"cluster (unplaced: {', '.join(missing) or 'none'}; placed twice: "
                f"{', '.join(sorted({d for d in placed if placed.count(d) > 1})) or 'none'})"
            )
        names = [p.name for p in self.replicators]
        if len(names) != len(set(names)):
            raise ValueError("replicators: each replicator needs its own name")
        advising: set[tuple[str, str]] = set()
        for i, p in enumerate(self.replicators):
            if len({h.name for h in p.streams}) != len(p.streams):
                raise ValueError(f"replicators[{i}].streams: each stream needs its own name")
            for o in p.down:
                if o.at + o.duration > self.scenario.duration:
                    raise ValueError(
                        f"replicators[{i}].down: an outage must end within the scenario duration"
                    )
            for j, h in enumerate(p.streams):
                where = f"replicators[{i}].streams[{j}]"
                for end in ("source", "target"):
                    if getattr(h, end) not in clusters:
                        raise ValueError(
                            f"{where}.{end}: {getattr(h, end)!r} is not a cluster of topology.clusters "
                            f"({', '.join(clusters)})"
                        )
                if h.sampling and h.inspect_duration is None:
                    raise ValueError(f"{where}.inspect_duration: needed with an inspection key, e.g. 1h")
                if h.sampling:
                    advises = (h.source, h.advisory_stream)
                    if advises in advising:
                        raise ValueError(
                            f"{where}.advisory_stream: another sampled stream already advises into "
                            f"{h.advisory_stream} on {h.source}; give each its own"
                        )
                    advising.add(advises)
        self.hop_levels()  # every source fed, no cycles

    # --- the topology, whichever form the file used ---------------------------------------------
    def clusters(self) -> dict[str, ClusterSpec]:
        top = self.topology
        if top.clusters is not None:
            return top.clusters
        return {
            "dc": ClusterSpec(
                servers=top.source_servers,
                data_centres=list(self.scenario.fleet.data_centres),
                stream=top.stream,
                max_file_store=top.max_file_store,
            ),
            "central": ClusterSpec(servers=top.target_servers, max_file_store=top.max_file_store),
        }

    def processes(self) -> list[ProcessSpec]:
        if self.topology.clusters is not None:
            return self.replicators
        top, r = self.topology, self.replicator
        hop = HopSpec(
            name=top.stream,
            source="dc",
            target="central",
            stream=top.stream,
            target_stream=top.target_stream,
            advisory_stream=top.advisory_stream,
            expect=self.expect,
            **r.model_dump(exclude={"down", "instances"}),
        )
        return [
            ProcessSpec(
                name=f"sr_{self.scenario.name}".replace("-", "_"),
                streams=[hop],
                down=r.down,
                instances=r.instances,
            )
        ]

    def hops(self) -> list[tuple[ProcessSpec, HopSpec]]:
        return [(p, h) for p in self.processes() for h in p.streams]

    def hop_levels(self) -> list[list[tuple[ProcessSpec, HopSpec]]]:
        """The hops in the order their sources become final: first those reading the fleet's
        streams, then those reading what earlier hops wrote (copies or advisories)."""
        fed = {(name, c.stream) for name, c in self.clusters().items() if c.data_centres}
        levels: list[list[tuple[ProcessSpec, HopSpec]]] = []
        todo = self.hops()
        while todo:
            ready = [(p, h) for p, h in todo if (h.source, h.stream) in fed]
            if not ready:
                p, h = todo[0]
                raise ValueError(
                    f"replicators {p.name} stream {h.name}: nothing feeds {h.stream} on {h.source} "
                    "(no fleet data centre publishes there and no other stream copies or advises into it)"
                )
            levels.append(ready)
            todo = [x for x in todo if x not in ready]
            for _, h in ready:
                fed.add((h.target, h.target_name))
                if h.sampling:
                    fed.add((h.source, h.advisory_stream))
        return levels


def load_spec(path: str | Path) -> ScenarioSpec:
    p = Path(path)
    try:
        data = read_yaml(p, "scenario file")
    except ValueError as e:
        raise ScenarioError(str(e)) from None
    try:
        scenario = parse_scenario(data)
    except ScenarioError as e:
        raise ScenarioError(f"{p}: {e}") from None
    try:
        return ScenarioSpec(
            scenario=scenario,
            topology=Topology.model_validate(data.get("topology") or {}),
            replicator=ReplicatorSpec.model_validate(data.get("replicator") or {}),
            expect=Expect.model_validate(data.get("expect") or {}),
            replicators=TypeAdapter(list[ProcessSpec]).validate_python(data.get("replicators") or []),
            path=p,
        )
    except ValidationError as e:
        first = e.errors()[0]
        where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in first["loc"]).lstrip(".")
        section = {
            "Topology": "topology",
            "ReplicatorSpec": "replicator",
            "Expect": "expect",
            "list[ProcessSpec]": "replicators",
        }.get(e.title, "")
        if section == "replicators":
            section, where = "", "replicators" + where
        msg = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            msg = "unknown key: remove it or check its spelling"
        key = ".".join(x for x in (section, where) if x)
        raise ScenarioError(f"{p}: {key + ': ' if key else ''}{msg}") from None
