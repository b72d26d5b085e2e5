"""Subject rewriting of copies (prefix added, tokens removed)."""

from __future__ import annotations

import pytest

from replicator.subjects import rewrite_subject


@pytest.mark.parametrize(
    ("subject", "prefix", "remove", "want"),
    [
        ("NODE_DATA.host", "FLEET_NODES", "NODE_DATA", "FLEET_NODES.host"),
        ("a.b", "", "", "a.b"),
        ("a.b", "p", "", "p.a.b"),
        ("choria.stream.input.registration.n1", "fleet", "choria.stream.input", "fleet.registration.n1"),
        ("x.REM.y.REM", "", "REM", "x.y"),
    ],
)
def test_subject_rewrite(subject: str, prefix: str, remove: str, want: str) -> None:
    assert rewrite_subject(subject, prefix, remove) == want
