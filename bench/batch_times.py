"""Where a sampled entry's batches spent their time, summed by minute from a replicator's log at
`loglevel: debug` (`python -m harness scenario run FILE --replicator-loglevel debug`).

Each sampled batch logs Spark's part (the read, the rules and the collect), the read-back and
publishing of its copies, and its advisories (replicator.spark.sampling). This sums them for
each minute after the first batch that read messages, and for the batches with many copies
(a wave of copies falling due), so docs/performance.md's split comes from a command:

    python -m bench.batch_times reports/scenarios/steady-100k.sr_steady_100k.log --after 35

The log's text format only (`log_format: text`, the default). A batch published and then
replayed (a kill before Spark committed it) is counted each time it ran.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

_LINE = re.compile(
    r"^(?P<when>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) DEBUG \S+: (?:(?P<stream>\S+): )?batch (?P<batch>\d+): "
    r"(?P<messages>\d+) messages, (?P<copies>\d+) copied, (?P<advisories>\d+) advisories; "
    r"spark (?P<spark>[\d.]+) s, copies (?P<copying>[\d.]+) s, advisories (?P<advising>[\d.]+) s, "
    r"all (?P<all>[\d.]+) s$"
)


@dataclass(frozen=True)
class BatchTimes:
    """One sampled batch's debug line: when it ended, what it held, where its seconds went."""

    ended: datetime
    stream: str  # the entry's `stream/target` prefix
    batch: int
    messages: int
    copies: int
    advisories: int
    spark_s: float
    copies_s: float
    advisories_s: float
    all_s: float


def parse(lines: Iterable[str]) -> Iterator[BatchTimes]:
    """The sampled batches' debug lines among a log's lines (others are passed over)."""
    for line in lines:
        m = _LINE.match(line.rstrip("\n"))
        if m is None:
            continue
        yield BatchTimes(
            ended=datetime.strptime(m["when"], "%Y-%m-%d %H:%M:%S,%f"),
            stream=m["stream"] or "",
            batch=int(m["batch"]),
            messages=int(m["messages"]),
            copies=int(m["copies"]),
            advisories=int(m["advisories"]),
            spark_s=float(m["spark"]),
            copies_s=float(m["copying"]),
            advisories_s=float(m["advising"]),
            all_s=float(m["all"]),
        )


def row(label: str, batches: list[BatchTimes]) -> str:
    """One table row: the batches' counts and seconds summed, and the rates they give."""

    def total(field: str) -> Any:
        return sum(getattr(b, field) for b in batches)

    def per(seconds: float, n: int) -> str:
        return f"{seconds / n * 1e6:,.0f}" if n else "-"

    messages, copies, spark_s, copies_s, all_s = (
        total(f) for f in ("messages", "copies", "spark_s", "copies_s", "all_s")
    )
    rate = f"{messages / all_s:,.0f}" if all_s else "-"
    return (
        f"| {label} | {len(batches)} | {messages:,} | {copies:,} | {total('advisories'):,} "
        f"| {spark_s:.2f} ({per(spark_s, messages)}) | {copies_s:.2f} ({per(copies_s, copies)}) "
        f"| {total('advisories_s'):.2f} | {all_s:.2f} | {rate} |"
    )


HEADER = (
    "| minute | batches | messages | copies | advisories | Spark s (µs/message) "
    "| copies s (µs/copy) | advisories s | batches' s | messages/batch-s |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def table(batches: list[BatchTimes], after_s: float = 0.0, wave_copies: int = 3000) -> str:
    """By minute from `after_s` seconds after the first batch that read messages (a batch counts
    in the minute it ended in), then the batches with at least `wave_copies` copies, then all
    from that first one (batches that read nothing count too: a sender's clock moving past its
    deadlines runs one, for its advisories)."""
    reading = [b for b in batches if b.messages]
    if not reading:
        return (
            "no sampled batch lines that read messages: run the replicator with loglevel: debug "
            "and log_format: text (harness: --replicator-loglevel debug)"
        )
    t0 = reading[0].ended
    counted = [b for b in batches if b.ended >= t0]
    minutes: dict[int, list[BatchTimes]] = {}
    for b in counted:
        since = (b.ended - t0).total_seconds() - after_s
        if since >= 0:
            minutes.setdefault(int(since // 60), []).append(b)
    rows = [HEADER] + [row(str(k + 1), minutes[k]) for k in sorted(minutes)]
    rows.append(row(f"≥ {wave_copies:,} copies", [b for b in counted if b.copies >= wave_copies]))
    rows.append(row("all", counted))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path, help="a replicator's log written at loglevel debug")
    ap.add_argument(
        "--after", type=float, default=0.0, help="minutes start this many seconds after the first batch"
    )
    ap.add_argument("--wave-copies", type=int, default=3000, help="a batch with this many copies is a wave's")
    ap.add_argument(
        "--stream", default="", help="the entry (`stream/target`, as logged) of a log with several"
    )
    args = ap.parse_args(argv)
    try:
        text = args.log.read_text(errors="replace")
    except OSError as e:
        print(f"batch_times: cannot read {args.log}: {e.strerror}; give a replicator's log", file=sys.stderr)
        return 2
    batches = list(parse(text.splitlines()))
    streams = sorted({b.stream for b in batches})
    if args.stream:
        batches = [b for b in batches if b.stream == args.stream]
        if not batches:
            print(f"batch_times: no batch of {args.stream} in {args.log}; it has {streams}", file=sys.stderr)
            return 2
    elif len(streams) > 1:
        print(
            f"batch_times: {args.log} has several sampled entries {streams}: choose one with --stream",
            file=sys.stderr,
        )
        return 2
    print(table(batches, args.after, args.wave_copies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
