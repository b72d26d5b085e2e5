"""Subject rewriting of copies (prefix added, tokens removed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicator.nats.wire import check_subject
from replicator.subjects import rewrite_subject, subject_matches, subject_tokens


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


@pytest.mark.parametrize(
    ("sender", "want"),
    [
        ("node1.example.net", "node1.example.net"),  # a host name keeps its tokens, as Choria's
        ("web 01", "web_01"),
        ("*", "_"),
        (">", "_"),
        ("a.*.b", "a._.b"),
        ("x>y", "x_y"),
        ("trailing.", "trailing._"),
        ("..", "_._._"),
        ("tab\there\nnewline", "tab_here_newline"),
        ("nœud-ünï", "nœud-ünï"),
    ],
)
def test_a_sender_never_makes_a_wildcard_or_invalid_advisory_subject(sender: str, want: str) -> None:
    assert subject_tokens(sender) == want


@given(st.text(min_size=1, max_size=40))
def test_any_sender_gives_a_subject_the_server_accepts(sender: str) -> None:
    subject = f"choria.advisories.new.{subject_tokens(sender)}"
    check_subject(subject)  # no whitespace
    tokens = subject.split(".")
    assert all(tokens) and "*" not in tokens and ">" not in tokens
    assert not any(c in subject for c in "*>")


def test_subject_matching() -> None:
    assert subject_matches("a.b.c", "a.*.c") and subject_matches("a.b.c", "a.>")
    assert not subject_matches("a", "a.>") and not subject_matches("a.b", "a.*.c")
    assert subject_matches("a.b", "a.b") and not subject_matches("a.b", "a.c")
