"""The live copies' mark (replicator.live_mark): a start keeps to it only for the same source
stream and the same target stream, not emptied nor shorter than it was; a missing or damaged
mark lets it skip nothing."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from replicator.live_mark import MARK_EVERY_S, LiveMark, MarkPacer, read_live_mark, write_live_mark

SOURCE_US = 1_700_000_000_000_000
TARGET_US = 1_700_000_100_000_000


def target(created_us: int = TARGET_US, messages: int = 500, last_seq: int = 900) -> SimpleNamespace:
    """A target stream's info as nats-py gives it: its creation and its state."""
    created = datetime.fromtimestamp(created_us / 1e6, UTC)
    return SimpleNamespace(created=created, state=SimpleNamespace(messages=messages, last_seq=last_seq))


MARK = LiveMark(
    seq=1_234,
    source_created_us=SOURCE_US,
    target_stream="T",
    target_created_us=TARGET_US,
    target_seq=800,
    copy_seq=1_230,
)


def test_a_mark_is_read_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "live-copied.json"
    assert read_live_mark(path) is None
    write_live_mark(path, MARK)
    assert read_live_mark(path) == MARK
    later = LiveMark(1_300, SOURCE_US, "T", TARGET_US, 870, 1_300)
    write_live_mark(path, later)  # replaced whole, never appended
    assert read_live_mark(path) == later
    assert not list(tmp_path.glob("*.tmp"))


def test_a_mark_is_kept_to_only_for_the_same_streams_and_a_target_that_kept_its_copies() -> None:
    assert MARK.not_kept_because(SOURCE_US, "T", target()) == ""
    assert MARK.not_kept_because(SOURCE_US, "T", target(last_seq=800)) == ""  # another writer's since: fine
    cases = {
        "the source stream was created again since": (SOURCE_US + 1, "T", target()),
        "it is for target stream T, the entry copies to OTHER now": (SOURCE_US, "OTHER", target()),
        "the target stream was created again or restored from a backup since (its creation time changed)": (
            SOURCE_US,
            "T",
            target(created_us=TARGET_US + 1),
        ),
        "the target stream holds no messages now": (SOURCE_US, "T", target(messages=0)),  # emptied
        "the target stream ends at sequence 799 now, before the mark's 800": (
            SOURCE_US,
            "T",
            target(last_seq=799),
        ),
    }
    for why, (source_us, stream, info) in cases.items():
        assert MARK.not_kept_because(source_us, stream, info) == why
    assert MARK.not_kept_because(SOURCE_US, "T", None) == "the target stream's info was not read"
    earlier = "it names none of our copies (written by a version before 2026-12-06)"
    assert (
        LiveMark(1_234, SOURCE_US, "T", TARGET_US, target_seq=0).not_kept_because(SOURCE_US, "T", target())
        == earlier
    )
    assert (
        LiveMark(1_234, SOURCE_US, "T", TARGET_US, 800).not_kept_because(SOURCE_US, "T", target()) == earlier
    )
    unknown_creations = LiveMark(1_234, 0, "T", TARGET_US, 800, 1_230)
    assert (
        unknown_creations.not_kept_because(0, "T", target())
        == "the source stream's creation time is not known"
    )
    no_target_creation = LiveMark(1_234, SOURCE_US, "T", 0, 800, 1_230)
    assert no_target_creation.not_kept_because(SOURCE_US, "T", target(created_us=0)) == (
        "the target stream's creation time is not known"
    )


def test_a_damaged_mark_is_none(tmp_path: Path) -> None:
    path = tmp_path / "live-copied.json"
    for damaged in ("", "{", '{"seq": "x"}', '{"seq": 1, "source_created_us": 1}', "[1]"):
        path.write_text(damaged)
        assert read_live_mark(path) is None, damaged


def test_the_mark_is_written_as_the_floor_moves_at_most_so_often_and_a_failure_said_once() -> None:
    floor, written, failures = [0], [], []
    failing = [False]

    def write() -> int:
        if failing[0]:
            raise OSError("disk full")
        written.append(floor[0])
        return floor[0]

    pacer = MarkPacer(lambda: floor[0], write, failures.append)
    pacer.note()
    assert written == []  # nothing acknowledged yet
    floor[0] = 10
    pacer.note()
    floor[0] = 20
    pacer.note()  # too soon after the last
    assert written == [10]
    pacer.note(force=True)
    assert written == [10, 20]
    pacer.note(force=True)
    assert written == [10, 20]  # the floor has not moved
    failing[0], floor[0] = True, 30
    pacer.note(force=True)
    pacer.note(force=True)
    assert len(failures) == 1 and written == [10, 20]
    failing[0] = False
    time.sleep(MARK_EVERY_S)
    pacer.note()
    assert written == [10, 20, 30]
