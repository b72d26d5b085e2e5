"""A scenario file: the emulator's fleet, events and clock, plus the topology, the replicator
(in the Choria format, durations in scenario time) and what must come out. Validated; every
problem is one line naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from emulator.scenario import Scenario, ScenarioError, Seconds, parse_scenario


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Topology(_Strict):
    source_servers: int = Field(default=3, ge=1, le=5)
    """The data centre: a JetStream cluster with routes."""
    target_servers: int = Field(default=1, ge=1, le=5)
    stream: str = "CHORIA_REGISTRATION"
    target_stream: str = ""
    advisory_stream: str = "CHORIA_REGISTRATION_ADVISORIES"


class Outage(_Strict):
    at: Seconds
    duration: Seconds


class ReplicatorSpec(_Strict):
    """The stream entry of the replicator's config, without URLs (the runner knows them)."""

    inspect_field: str = ""
    inspect_header: str = ""
    inspect_subject_token: int = 0
    inspect_duration: Seconds | None = None
    warn_duration: Seconds | None = None
    size_trigger: float = 0
    inspect_force_field: str = ""
    advisory_subject: str = "choria.registration.advisories.%s.%v"
    reliable: bool = True
    down: list[Outage] = Field(default_factory=list)
    """Windows (scenario time) in which the replicator is stopped."""

    @property
    def sampling(self) -> bool:
        return bool(self.inspect_field or self.inspect_header or self.inspect_subject_token)


class Expect(_Strict):
    copy_ratio: tuple[float, float] | None = None
    """Bounds of published / copied."""
    copies: Literal["exact"] = "exact"
    advisories: Literal["exact"] | dict[str, int] = "exact"
    """exact: every advisory the rules give, no other; or counts per event."""
    events: dict[Literal["new", "timeout", "recover", "expire"], tuple[int, int]] = Field(
        default_factory=dict
    )
    """Bounds on the number of advisories of each event (what the scenario is about)."""
    max_final_lag: int = 0
    min_rate: float = 0
    """Messages per second the replicator must have processed while the fleet published."""


class ScenarioSpec(_Strict):
    scenario: Scenario
    topology: Topology
    replicator: ReplicatorSpec
    expect: Expect
    path: Path | None = None

    @model_validator(mode="after")
    def _check(self) -> ScenarioSpec:
        r = self.replicator
        if r.sampling and r.inspect_duration is None:
            raise ValueError("replicator.inspect_duration: needed with an inspection key, e.g. 1h")
        for o in r.down:
            if o.at + o.duration > self.scenario.duration:
                raise ValueError("replicator.down: an outage must end within the scenario duration")
        return self

    def replicator_stream(self, source_url: str, target_url: str) -> dict[str, Any]:
        """The Choria-format stream entry, durations compressed by the speedup."""
        r, k = self.replicator, self.scenario.speedup
        entry: dict[str, Any] = {
            "stream": self.topology.stream,
            "target_stream": self.topology.target_stream or self.topology.stream,
            "source_url": source_url,
            "target_url": target_url,
        }
        if r.sampling:
            entry.update(
                {
                    key: getattr(r, key)
                    for key in (
                        "inspect_field",
                        "inspect_header",
                        "inspect_subject_token",
                        "inspect_force_field",
                    )
                    if getattr(r, key)
                }
            )
            assert r.inspect_duration is not None
            entry["inspect_duration"] = f"{r.inspect_duration / k * 1000:.0f}ms"
            if r.warn_duration is not None:
                entry["warn_duration"] = f"{r.warn_duration / k * 1000:.0f}ms"
            if r.size_trigger:
                entry["size_trigger"] = r.size_trigger
            entry["advisory"] = {"subject": r.advisory_subject, "reliable": r.reliable}
        return entry


def load_spec(path: str | Path) -> ScenarioSpec:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read scenario file: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{p}: not valid YAML: {getattr(e, 'problem', e)}") from None
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
            path=p,
        )
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        section = {"Topology": "topology", "ReplicatorSpec": "replicator", "Expect": "expect"}.get(
            e.title, ""
        )
        msg = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            msg = "unknown key: remove it or check its spelling"
        raise ScenarioError(f"{p}: {section + '.' if section else ''}{where}: {msg}") from None
