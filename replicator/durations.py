"""Duration strings as the Choria Stream Replicator writes them: Go durations plus d, w, M and Y."""

from __future__ import annotations

import math
import re
from datetime import timedelta

_MAX_SECONDS = 100 * 365 * 86400  # a century: beyond it, a typo

# Units in seconds. M (month) and Y (year) are fixed lengths, as in Choria's util.ParseDurationString.
_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
    "M": 30 * 86400.0,
    "Y": 365 * 86400.0,
    "y": 365 * 86400.0,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d|w|M|Y|y)")
_HINT = "use a number followed by a unit, e.g. 30s, 5m, 1h, 1d, 1w, 1M, 1Y (or combined: 1h30m)"


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """Parse '1h', '90s', '1h30m', '2d', '1w', '1M', '1Y'; a bare number is seconds."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}: {_HINT}")
    if isinstance(text, int | float):
        if not math.isfinite(text) or text < 0 or text > _MAX_SECONDS:
            raise ValueError(f"invalid duration {text!r}: give a number of seconds from 0 to {_MAX_SECONDS}")
        return timedelta(seconds=float(text))
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r}: {_HINT}")
    s = text.strip()
    if not s:
        raise ValueError(f"invalid duration {text!r}: {_HINT}")
    pos = 0
    total = 0.0
    for match in _PART.finditer(s):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(s):
        raise ValueError(f"invalid duration {text!r}: {_HINT}")
    if total > _MAX_SECONDS:  # and timedelta holds at most 999,999,999 days
        raise ValueError(f"invalid duration {text!r}: give at most a century (100Y)")
    return timedelta(seconds=total)
