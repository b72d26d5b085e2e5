"""Choria's (Go) sampler state file, read and written: its senders seed ours, ours go back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replicator.sampling import state
from replicator.sampling.choria_state import (
    ChoriaSender,
    ChoriaStateError,
    choria_state_file,
    read_choria_state,
    seed_tables,
    write_choria_state,
)
from replicator.sampling.extract import bucket_of
from replicator.sampling.rules import Event, Message, SamplingParams

# As Go writes it (idtrack.Tracker marshalled): nanosecond times, `advised` only when true,
# Go's zero time for a sender never copied.
GO_FILE = {
    "Items": {
        "node1.example.net": {"seen": "2023-01-11T12:47:31.714555561Z", "copied": "2023-01-11T12:47:31.721943055Z",
                              "size": 13916},
        "node2.example.net": {"seen": "2023-01-11T12:40:00Z", "copied": "0001-01-01T00:00:00Z", "advised": True,
                              "size": 2048.0},
    }
}  # fmt: skip


def test_go_state_is_read_with_millisecond_times_and_advised_as_warned(tmp_path: Path) -> None:
    path = choria_state_file(tmp_path, "CHORIA_REGISTRATION", "US_EAST_1")
    assert path.name == "CHORIA_REGISTRATION_US_EAST_1.json"
    path.write_text(json.dumps(GO_FILE))
    one, two = sorted(read_choria_state(path), key=lambda s: s.sender)
    assert one == ChoriaSender("node1.example.net", 1673441251714, 1673441251721, 13916, False)
    assert two == ChoriaSender("node2.example.net", 1673440800000, 0, 2048, True)


def test_what_ours_writes_go_reads_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "S_n.json"
    senders = [
        ChoriaSender("a", 1_700_000_000_123, 1_700_000_000_100, 10, False),
        ChoriaSender("b", 5, 0, 0, True),
    ]
    write_choria_state(path, senders)
    doc = json.loads(path.read_text())
    assert doc["Items"]["b"] == {"seen": "1970-01-01T00:00:00.005000Z", "copied": "0001-01-01T00:00:00Z",
                                 "size": 0, "advised": True}  # fmt: skip
    assert "advised" not in doc["Items"]["a"]  # omitted when false, as Go's omitempty
    assert sorted(read_choria_state(path), key=lambda s: s.sender) == senders
    assert [p.name for p in tmp_path.iterdir()] == ["S_n.json"]  # no temporary file left


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("not json", "cannot read Choria's sampler state"),
        ('{"items": {}}', 'no "Items" object'),
        ('{"Items": {"a": {"seen": "yesterday"}}}', "Items['a'].seen: 'yesterday' is not an RFC 3339 time"),
        ('{"Items": {"a": {"seen": "2023-01-11T12:40:00Z", "size": "big"}}}', "Items['a'].size"),
    ],
)
def test_a_file_that_is_not_gos_state_is_one_clear_error(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "S_n.json"
    path.write_text(content)
    with pytest.raises(ChoriaStateError, match="^" + str(path).replace(".", r"\.")) as e:
        read_choria_state(path)
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_seeded_senders_are_neither_new_nor_copied_again_within_their_interval() -> None:
    """The point of importing: the next message of a sender Go copied a minute ago is skipped,
    without a `new` advisory; a sender Go advised `timeout` recovers."""
    s = 1000
    p = SamplingParams(inspect_ms=3600 * s, warn_ms=1800 * s)
    now = 1_700_000_000_000
    senders = [ChoriaSender("a", now - 60 * s, now - 60 * s, 1000, False),
               ChoriaSender("b", now - 2000 * s, now - 2000 * s, 1000, True)]  # fmt: skip
    seeds = seed_tables(senders, 8)
    assert set(seeds) == {bucket_of("a", 8), bucket_of("b", 8)}
    for sender in ("a", "b"):
        table = state.decode(seeds[bucket_of(sender, 8)])
        copies, advs = table.process([Message(1, sender, now, 1000)], now, p)
        assert copies == [False]
        assert [a.event for a in advs] == ([] if sender == "a" else [Event.RECOVER])
