"""How a connection's asynchronous errors are logged (replicator.nats.connect.error_line)."""

from __future__ import annotations

import re
from pathlib import Path

from nats.errors import Error

from replicator.nats.connect import PERMISSION_HINT, error_line

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
