"""How a connection's asynchronous errors are logged (replicator.nats.connect.error_line)."""

from __future__ import annotations

from nats.errors import Error

from replicator.nats.connect import PERMISSION_HINT, error_line


def test_a_refusal_by_permissions_says_what_to_change() -> None:
    refused = Error('nats: permissions violation for publish to "$JS.API.STREAM.INFO.NODE_DATA"')
    assert error_line(refused) == f"{refused}: {PERMISSION_HINT}"
    assert "docs/operations.md" in PERMISSION_HINT and "\n" not in error_line(refused)


def test_other_errors_are_logged_as_they_are() -> None:
    assert error_line(Error("nats: unexpected EOF")) == "nats: unexpected EOF"
    assert error_line(TimeoutError()) == "TimeoutError"
