"""A stop's bound: the process ends within STOP_DEADLINE_S of the request to stop, wherever the
replicator's thread is stuck, and says where (docs/operations.md: "a stop that takes longer than
45 s ... exits 1 at once, naming the step it was in")."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from replicator.stop_deadline import StopDeadline, StopSteps

# Generous: the exit is expected after DEADLINE_S, and a loaded machine may be slow to run it.
DEADLINE_S, WAIT_S = 0.3, 30.0


class _Exit:
    """Stands in for os._exit: records the code, so the test process lives on."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


def _stuck_in_a_call(release: threading.Event, entered: threading.Event) -> None:
    entered.set()
    release.wait(WAIT_S)  # a call into the JVM that does not return


def test_a_stop_past_its_deadline_says_which_step_it_was_in_and_what_was_slow(monkeypatch) -> None:
    steps = StopSteps()
    monkeypatch.setattr(StopSteps, "SLOW_S", 0.0)  # every step counts as slow
    with steps.step("REG/dc1's query"):
        pass
    with steps.step("Spark"):
        assert steps.describe().startswith("still stopping Spark, for 0.")
        assert "s; before that REG/dc1's query " in steps.describe()
    assert steps.describe().startswith("stopping; before that REG/dc1's query ")
    assert ", Spark " in steps.describe()


def test_a_stop_requested_while_the_replicator_is_stuck_ends_the_process_naming_where(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The hang CI met (test_head_start at 9b92b67): SIGTERM came while the main loop was in a
    call that never returned, so its shutdown, and the deadline that was inside it, never
    began. The deadline now runs from the request itself."""
    from replicator.config import Config
    from replicator.runner import Runner

    cfg = Config.model_validate({"name": "dc1", "state_store": str(tmp_path),
                                 "streams": [{"stream": "S", "source_url": "nats://127.0.0.1:1",
                                              "target_url": "nats://127.0.0.1:2"}]})  # fmt: skip
    runner = Runner(cfg, cfg.streams)
    release, entered = threading.Event(), threading.Event()
    exit_now = _Exit()
    stuck = threading.Thread(target=_stuck_in_a_call, args=(release, entered))
    runner._stop_deadline = StopDeadline(DEADLINE_S, runner._stop_steps, exit_now)
    runner._stop_deadline.watched = stuck
    try:
        stuck.start()
        assert entered.wait(WAIT_S)
        runner.request_stop()  # what SIGTERM's handler runs; the stuck call goes on
        assert exit_now.called.wait(WAIT_S), "the process was never ended"
    finally:
        release.set()
        stuck.join()
        runner.loop.stop()
    assert exit_now.codes == [1]
    [line] = [r.getMessage() for r in caplog.records if "clean stop took longer" in r.getMessage()]
    assert "(the running thread is in threading.py:" in line, line
    assert ", from test_stop_deadline.py:" in line and line.endswith(" in _stuck_in_a_call); exiting now"), (
        line
    )


def test_the_deadline_runs_from_the_request_not_from_when_the_shutdown_begins() -> None:
    exit_now = _Exit()
    deadline = StopDeadline(DEADLINE_S, StopSteps(), exit_now)
    deadline.start()
    deadline.start()  # a second SIGTERM, or the shutdown's own start: the same deadline
    assert deadline.remaining() <= DEADLINE_S
    assert exit_now.called.wait(WAIT_S)
    assert exit_now.codes == [1]
    deadline.expire()  # the shutdown's own wait ending as well: one exit
    assert exit_now.codes == [1]


def test_a_stop_done_in_time_does_not_end_the_process() -> None:
    exit_now = _Exit()
    deadline = StopDeadline(DEADLINE_S, StopSteps(), exit_now)
    deadline.start()
    deadline.done()
    assert not exit_now.called.wait(DEADLINE_S * 3)
    deadline.expire()
    assert exit_now.codes == []


def test_a_shutdown_under_way_is_described_by_its_step(caplog: pytest.LogCaptureFixture) -> None:
    exit_now = _Exit()
    steps = StopSteps()
    deadline = StopDeadline(DEADLINE_S, steps, exit_now)
    with steps.step("S/dc1's query"):
        deadline.start()
        assert exit_now.called.wait(WAIT_S)
    [line] = [r.getMessage() for r in caplog.records if "clean stop took longer" in r.getMessage()]
    # Any duration: a loaded machine wakes the watcher late.
    assert re.search(r"\(still stopping S/dc1.s query, for \d+\.\d s\)", line), line
