"""Fast parsing of the RFC3339Nano times NATS puts in `Nats-Time-Stamp`."""

from __future__ import annotations

import calendar
from functools import lru_cache


@lru_cache(maxsize=4096)
def _epoch_seconds(prefix: str) -> int:
    # prefix: 'YYYY-MM-DDTHH:MM:SS'; many messages share a second, so this is cached.
    return calendar.timegm(
        (
            int(prefix[0:4]),
            int(prefix[5:7]),
            int(prefix[8:10]),
            int(prefix[11:13]),
            int(prefix[14:16]),
            int(prefix[17:19]),
            0,
            0,
            0,
        )
    )


def rfc3339_to_ns(value: str) -> int:
    """'2026-11-22T10:56:32.13428259Z' -> nanoseconds since the epoch (UTC only, as NATS writes)."""
    secs = _epoch_seconds(value[:19])
    # The usual form, with 1-9 fraction digits and Z, without a loop over characters.
    if value[19:20] == "." and value[-1:] == "Z" and 21 <= len(value) <= 30:
        digits = value[20:-1]
        if digits.isdigit() and digits.isascii():
            return secs * 1_000_000_000 + int(digits.ljust(9, "0"))
    frac = 0
    rest = value[19:]
    if rest.startswith("."):
        end = 1
        while end < len(rest) and rest[end].isdigit():
            end += 1
        digits = rest[1:end][:9]
        frac = int(digits.ljust(9, "0")) if digits else 0
        rest = rest[end:]
    if rest not in ("Z", "", "+00:00"):
        raise ValueError(f"unsupported time zone in {value!r}")
    return secs * 1_000_000_000 + frac
