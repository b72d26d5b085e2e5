"""`admin fleet`: the fleet at a glance from the committed sampling state, without servers."""

from __future__ import annotations

from replicator.admin import StateSummary, TrackedSender, format_fleet
from replicator.config import parse_config

MIN = 60_000
NOW = 1_700_000_000_000


def test_counts_by_state_and_the_senders_that_changed_state_recently() -> None:
    cfg = parse_config({"name": "dc1", "streams": [{
        "stream": "REG", "source_url": "nats://a:4222", "target_url": "nats://b:4222",
        "inspect_field": "sender", "inspect_duration": "60m", "warn_duration": "30m",
    }]})  # fmt: skip
    senders = [
        TrackedSender("steady", NOW - MIN, NOW - MIN, 100, False, 0, NOW - 600 * MIN),
        TrackedSender("joined", NOW - 2 * MIN, NOW - 2 * MIN, 100, False, 0, NOW - 5 * MIN),
        TrackedSender(
            "quiet", NOW - 40 * MIN, NOW - 40 * MIN, 100, True, 0, NOW - 600 * MIN
        ),  # timed out 10 min ago
        TrackedSender("long-quiet", NOW - 55 * MIN, NOW - 55 * MIN, 100, True, 0, 0),  # timed out 25 min ago
        TrackedSender("back", NOW - MIN, NOW - MIN, 100, False, 0, NOW - 600 * MIN, NOW - 15 * MIN),
    ]
    expired = {"gone": NOW - 3 * MIN, "gone-long-ago": NOW - 50 * MIN, "back": NOW - 40 * MIN}
    summary = StateSummary(senders, NOW, 32, expired)
    lines = list(format_fleet(cfg.streams[0], summary, minutes=20, limit=10))
    assert lines[0].startswith(
        # "back" expired 40 min ago and is tracked again: not counted as gone.
        "dc1 (REG): 5 senders: 3 healthy, 2 warning (advised timed out), 2 expired in the last hour"
    )
    assert lines[1] == "changed in the last 20 min: 4"
    # The latest change first.
    assert [ln.split()[:2] for ln in lines[2:]] == [
        ["expire", "gone"],  # 3 min ago
        ["new", "joined"],  # 5 min ago
        ["timeout", "quiet"],  # 10 min ago
        ["recover", "back"],  # 15 min ago
    ]
    assert list(format_fleet(cfg.streams[0], summary, minutes=20, limit=1))[-1] == "  ... 3 more (--limit)"
