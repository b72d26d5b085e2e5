"""Ground truth for a scenario run: the sampling rules applied to what the source stream
actually holds, compared message by message and advisory by advisory with what arrived."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from replicator.headers import SOURCE_HEADER, parse_source_header
from replicator.nats.readers import RawMessage
from replicator.nats.wire import first_value
from replicator.sampling.extract import SenderExtractor
from replicator.sampling.reference import reference
from replicator.sampling.rules import Message, SamplingParams

AdvKey = tuple[str, str, int]  # (value, event, timestamp s)


@dataclass
class Check:
    name: str
    expected: Any
    got: Any
    ok: bool
    detail: str = ""


@dataclass
class Truth:
    copied: list[int]
    advisories: list[AdvKey]
    published: int
    final_clock_ms: int


def digest(extractor: SenderExtractor | None) -> Callable[[list[RawMessage]], list[Message]]:
    """What the sampling rules read of a message (its sender, time, size, force flag), for
    ground_truth; without an extractor (a plain copy) the sequence alone."""

    def one_chunk(chunk: list[RawMessage]) -> list[Message]:
        if extractor is None:
            return [Message(m.seq, None, 0, 0, False) for m in chunk]
        out = []
        for m in chunk:
            sender, force = extractor.extract(m.subject, m.headers, m.data)
            out.append(Message(m.seq, sender, m.ts_ns // 1_000_000, len(m.data), force))
        return out

    return one_chunk


def ground_truth(msgs: list[Message], p: SamplingParams | None, final_ms: int | None = None) -> Truth:
    """The copies and advisories the rules give for the source's messages (digested);
    `final_ms`: the clock the advisories are due by (default: the end of the run, once every
    sender that went silent has expired)."""
    if p is None:
        return Truth([m.seq for m in msgs], [], len(msgs), 0)
    # The run ends after every sender that went silent has expired.
    final = (max(m.ts_ms for m in msgs) if msgs else 0) + p.inspect_ms if final_ms is None else final_ms
    copied, advs = reference(msgs, final, p)
    return Truth(copied, sorted((a.sender, str(a.event), a.event_ms // 1000) for a in advs), len(msgs), final)


def copied_sequences(
    replicator: str | None = None, config_name: str | None = None
) -> Callable[[list[RawMessage]], list[int]]:
    """A digest of a target stream's messages: the source sequences of its copies, in target
    order; only those written by the given replicator and stream entry (a target stream can be
    fed by several)."""

    def one_chunk(target: list[RawMessage]) -> list[int]:
        out = []
        for m in target:
            mark = parse_source_header(first_value(m.headers, SOURCE_HEADER))
            if (
                mark is not None
                and replicator in (None, mark.replicator)
                and config_name in (None, mark.config_name)
            ):
                out.append(mark.sequence)
        return out

    return one_chunk


def advisory_keys(advisories: list[RawMessage]) -> list[AdvKey]:
    """A digest of an advisory stream's messages: (value, event, timestamp) of each."""
    docs = [json.loads(m.data) for m in advisories]
    return [(d["value"], d["event"], int(d["timestamp"])) for d in docs]


def _examples(items: list[Any], n: int = 5) -> str:
    return ", ".join(map(str, items[:n])) + (" ..." if len(items) > n else "")


def compare_copies(truth: Truth, got: list[int]) -> Check:
    want, have = Counter(truth.copied), Counter(got)
    missing, extra = sorted((want - have).elements()), sorted((have - want).elements())
    order_ok = got == sorted(got)
    detail = ""
    if missing:
        detail += f"missing seqs {_examples(missing)}; "
    if extra:
        detail += f"unexpected or doubled seqs {_examples(extra)}; "
    if not order_ok:
        detail += "copies out of source order; "
    return Check("copied messages", len(truth.copied), len(got), not (missing or extra) and order_ok, detail)


def compare_advisories(truth: Truth, got: list[AdvKey], expect: Any, tolerance_s: int = 1) -> Check:
    """Each expected advisory must arrive once with its event and value, its event time within
    `tolerance_s`; nothing else may arrive."""
    if isinstance(expect, dict):
        counts = dict(Counter(e for _, e, _ in got))
        return Check("advisory counts", expect, counts, counts == expect)
    pending = Counter(got)
    missing: list[AdvKey] = []
    for key in truth.advisories:
        if pending[key]:
            pending[key] -= 1
            continue
        near = next(
            (k for k in pending if pending[k] and k[:2] == key[:2] and abs(k[2] - key[2]) <= tolerance_s),
            None,
        )
        if near is None:
            missing.append(key)
        else:
            pending[near] -= 1
    extra = sorted(pending.elements())
    detail = ""
    if missing:
        detail += f"missing {_examples(missing)}; "
    if extra:
        detail += f"unexpected or doubled {_examples(extra)}; "
    return Check(
        "advisories (event, value, time)", len(truth.advisories), len(got), not (missing or extra), detail
    )


@dataclass
class Report:
    name: str
    checks: list[Check] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def table(self) -> str:
        rows = [f"scenario {self.name}: {'PASS' if self.ok else 'FAIL'}"]
        width = max([len(c.name) for c in self.checks] + [10])
        rows.append(f"  {'check':{width}}  {'expected':>14}  {'got':>14}  result")
        for c in self.checks:
            rows.append(f"  {c.name:{width}}  {c.expected!s:>14}  {c.got!s:>14}  {'ok' if c.ok else 'FAIL'}")
            if c.detail:
                rows.append(f"  {'':{width}}  -> {c.detail.rstrip('; ')}")
        flat = {k: v for k, v in self.figures.items() if not isinstance(v, dict)}
        rows.append("  " + ", ".join(f"{k}={v}" for k, v in flat.items()))
        for k, v in self.figures.items():
            if isinstance(v, dict):  # a hop's own figures
                rows.append(f"  {k}: " + ", ".join(f"{kk}={vv}" for kk, vv in v.items()))
        return "\n".join(rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "checks": [c.__dict__ for c in self.checks],
            "figures": self.figures,
        }
