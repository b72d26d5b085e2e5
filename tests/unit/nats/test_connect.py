"""How a connection's asynchronous errors are logged (replicator.nats.connect.error_line)."""

from __future__ import annotations

import re
from pathlib import Path

from nats.errors import Error

from replicator.nats.connect import ERROR_LOG_INTERVAL_S, PERMISSION_HINT, RepeatLimit, error_line

OPERATIONS_MD = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def test_a_refusal_by_permissions_says_what_to_change() -> None:
    # As nats-py reports the server's -ERR line: in lower case.
    refused = Error('nats: permissions violation for publish to "$js.api.stream.info.node_data"')
    assert error_line(refused) == f"{refused}: {PERMISSION_HINT}"
    assert "lower case" in PERMISSION_HINT and "\n" not in error_line(refused)


def test_the_documented_refusal_is_the_line_logged() -> None:
    """docs/operations.md shows a refusal's warning: it is what error_line writes."""
    shown = re.search(r"NATS connection [^:]+: (nats: permissions violation .*)\n", OPERATIONS_MD.read_text())
    assert shown, "docs/operations.md shows no refusal"
    subject = re.search(r'"([^"]+)"', shown.group(1))
    assert subject
    refused = Error(f'nats: permissions violation for publish to "{subject.group(1)}"')
    assert shown.group(1) == error_line(refused)


def test_other_errors_are_logged_as_they_are() -> None:
    assert error_line(Error("nats: unexpected EOF")) == "nats: unexpected EOF"
    assert error_line(TimeoutError()) == "TimeoutError"


def test_a_connections_same_error_is_logged_at_most_every_30_s() -> None:
    """docs/operations.md: a refusal's warning "is repeated at most every 30 s for each subject"
    on a connection (each connection's error callback has its own RepeatLimit)."""
    assert ERROR_LOG_INTERVAL_S == 30.0 and "at most every 30 s for each subject" in " ".join(
        OPERATIONS_MD.read_text().split()
    )
    now = [100.0]
    repeats = RepeatLimit(clock=lambda: now[0])
    first, second = (
        error_line(Error(f'nats: permissions violation for publish to "{s}"')) for s in ("a", "b")
    )
    seen = []
    for t in (100.0, 101.0, 129.9, 130.0, 131.0, 159.99, 160.0):
        now[0] = t
        seen += [(t, text) for text in (first, second) if repeats.allows(text)]
    assert seen == [
        (100.0, first),
        (100.0, second),
        (130.0, first),
        (130.0, second),
        (160.0, first),
        (160.0, second),
    ]
