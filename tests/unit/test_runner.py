"""The runner's one-line error reasons."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from replicator.runner import Runner, _first_line


def test_a_failed_batch_is_reported_by_its_python_reason_not_sparks_wrapper() -> None:
    wrapped = Exception(
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
        '  File "sink.py", line 3, in f\n'
        "    raise PublishError(\n"
        "replicator.nats.publisher.PublishError: 500 of 1000 messages were not stored (maximum messages "
        "exceeded)\n"
    )
    assert _first_line(wrapped) == (
        "PublishError: 500 of 1000 messages were not stored (maximum messages exceeded)"
    )
    worker = Exception(
        "PythonException: An exception was thrown from the Python worker:\n"
        "Traceback (most recent call last):\n"
        '  File "readers.py", line 9, in chunks\n'
        "nats.errors.UnexpectedEOF: nats: unexpected EOF\n"
    )
    assert _first_line(worker) == "UnexpectedEOF: nats: unexpected EOF"
    assert _first_line(ValueError("plain reason\nmore")) == "plain reason"
    assert _first_line(RuntimeError()) == "RuntimeError"


def test_a_java_error_is_reported_by_its_exception_not_py4js_call_line() -> None:
    py4j_style = Exception(
        "An error occurred while calling o82.load.\n"
        ': java.io.IOException: Cannot run program "./environment/bin/python": error=2, No such file\n'
        "\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)\n"
    )
    assert _first_line(py4j_style) == (
        'IOException: Cannot run program "./environment/bin/python": error=2, No such file'
    )


class _Captured(Exception):
    """PySpark's captured JVM exception as the runner sees it: a message, the JVM's stack trace
    (its causes as "Caused by:" lines) and the cause, captured the same way."""

    def __init__(self, desc: str, stack: str, cause: _Captured | None = None) -> None:
        super().__init__(desc)
        self._desc, self._stackTrace, self._cause = desc, stack, cause


def test_a_java_error_is_reported_by_its_innermost_cause_not_sparks_wrapper() -> None:
    full_disk = _Captured(
        "Exception thrown in awaitResult:",
        "\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:53)",
        _Captured(
            "Job aborted due to stage failure",
            "org.apache.spark.SparkException: Job aborted due to stage failure\n"
            "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2935)\n"
            "Caused by: java.io.IOException: No space left on device\n"
            "\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)\n",
        ),
    )
    assert _first_line(full_disk) == "IOException: No space left on device"
    python_inside = _Captured(
        "Job aborted",
        "Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "sink.py", line 3, in f\n'
        "replicator.nats.publisher.PublishError: 3 of 9 messages were not stored\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)",
    )
    assert _first_line(python_inside) == "PublishError: 3 of 9 messages were not stored"


class _Stream:
    """What the runner's retry logic asks of a stream: its name, its sink's landed copies, and
    whether its servers answer (scripted)."""

    def __init__(self, answers: list[bool]) -> None:
        import logging
        from types import SimpleNamespace

        self.label = "S/dc1"
        self.log = logging.getLogger("test")
        self.sink = SimpleNamespace(landed=0)
        self.answers = answers
        self.election: _Election | None = None
        self.stood_by = 0
        self.in_flight = False

    def servers_answer(self) -> bool:
        return self.answers.pop(0) if self.answers else True

    def leading(self) -> bool:
        return self.election is None or self.election.leading()

    def stand_by(self) -> None:
        self.stood_by += 1

    def owes_copies(self) -> bool:
        return self.in_flight


class _Election:
    """What the runner asks of an entry's election when its start or batch fails."""

    def __init__(self) -> None:
        self.asides: list[float] = []

    def leading(self) -> bool:
        return not self.asides

    def step_aside(self, pause: float) -> None:
        self.asides.append(pause)


def _runner() -> tuple[Runner, list[str]]:
    from replicator.backoff import Backoff
    from replicator.monitor import Readiness

    runner = Runner.__new__(Runner)  # the retry logic only: no Spark, no servers
    runner._retries, runner._landed_at_failure = {}, {}
    runner.readiness = Readiness()
    runner.backoff = {"S/dc1": Backoff()}
    started: list[str] = []
    runner._start = lambda r: started.append(r.label)  # type: ignore[method-assign]
    return runner, started


def test_a_retry_whose_servers_come_back_starts_at_once_not_after_its_backoff() -> None:
    runner, started = _runner()
    for _ in range(5):
        runner.backoff["S/dc1"].next_wait()  # a long outage: the next wait is long,
    runner._landed_at_failure["S/dc1"] = 0  # and nothing landed since the last failure
    stream = _Stream([False, False, True])  # down when it failed, down once more, then back
    runner._schedule_retry(stream)  # type: ignore[arg-type]
    assert runner._retries["S/dc1"].due - time.monotonic() > 5
    runner._retry_when_due(stream)  # type: ignore[arg-type]
    assert started == []
    runner._retry_when_due(stream)  # type: ignore[arg-type]
    assert started == ["S/dc1"] and "S/dc1" not in runner._retries


def test_a_failing_stream_waits_1_2_4_8_16_30_s_and_from_1_s_again_once_copies_landed() -> None:
    """operations.md: a failed batch is retried with a backoff doubling up to 30 s, which
    starts again from 1 s once copies land (even in a batch that then failed)."""
    runner, _ = _runner()
    stream = _Stream([])

    def fail(landed: int) -> int:
        stream.sink.landed = landed
        runner._schedule_retry(stream)  # type: ignore[arg-type]
        return round(runner._retries.pop("S/dc1").due - time.monotonic())

    assert [fail(landed=0) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert fail(landed=1) == 1  # a copy landed since the last failure: a fresh fault
    assert [fail(landed=1) for _ in range(3)] == [2, 4, 8]


def test_a_refusal_with_servers_answering_waits_out_its_backoff() -> None:
    runner, started = _runner()
    stream = _Stream([])  # the servers answer all along: the target refused, say
    runner._schedule_retry(stream)  # type: ignore[arg-type]
    runner._retry_when_due(stream)  # type: ignore[arg-type]
    assert started == []
    runner._retries["S/dc1"].due = time.monotonic()
    runner._retry_when_due(stream)  # type: ignore[arg-type]
    assert started == ["S/dc1"]


def test_each_batchs_steps_reach_the_metrics_and_a_slow_one_is_logged() -> None:
    import logging
    from types import SimpleNamespace

    from replicator.metrics import MetricLabels, metrics

    labels = MetricLabels("STEPS", "dc1", "steps")
    committed: list[bool] = []
    stream = SimpleNamespace(query_name="sr_STEPS_steps", sink=SimpleNamespace(labels=labels),
                             log=logging.getLogger("steps"), small_batches=None,
                             batch_committed=lambda: committed.append(True))  # fmt: skip
    runner = Runner.__new__(Runner)  # the progress handling only: no Spark, no servers
    runner.replications = [stream]  # type: ignore[list-item]

    def count(step: str) -> float:
        return metrics().batch_steps.labels(*labels.values(), step)._sum.get()  # type: ignore[no-any-return]

    lines: list[str] = []
    handler = logging.Handler()
    levels: list[int] = []
    handler.emit = lambda record: (  # type: ignore[method-assign]
        lines.append(record.getMessage()),
        levels.append(record.levelno),
    )
    stream.log.addHandler(handler)
    stream.log.setLevel(logging.INFO)
    runner._on_batch({"name": "sr_STEPS_steps", "batchId": 7, "numInputRows": 3,
                      "durationMs": {"addBatch": 30, "walCommit": 9, "triggerExecution": 45}})  # fmt: skip
    runner._on_batch({"name": "sr_OTHER_query", "durationMs": {"addBatch": 1000}})  # not ours: ignored
    assert [count(s) for s in ("addBatch", "walCommit", "triggerExecution")] == pytest.approx(
        [0.030, 0.009, 0.045]
    )
    assert lines == []
    runner._on_batch({"name": "sr_STEPS_steps", "batchId": 8, "numInputRows": 50_000,
                      "durationMs": {"addBatch": 6_000, "latestOffset": 200, "triggerExecution": 6_300}})  # fmt: skip
    assert count("addBatch") == pytest.approx(6.030)
    assert lines == ["batch 8 took 6.3 s (addBatch 6.0 s, latestOffset 0.2 s); 50,000 rows"]
    # A batch the driver read itself: Spark counts no rows for it, the reader does.
    stream.small_batches = SimpleNamespace(rows={9: 12})
    runner._on_batch({"name": "sr_STEPS_steps", "batchId": 9, "numInputRows": 0,
                      "durationMs": {"addBatch": 5_500, "triggerExecution": 5_600}})  # fmt: skip
    assert lines[-1] == "batch 9 took 5.6 s (addBatch 5.5 s); 12 rows"
    # At loglevel debug every batch gets its line, at debug.
    stream.log.setLevel(logging.DEBUG)
    runner._on_batch({"name": "sr_STEPS_steps", "batchId": 10, "numInputRows": 3,
                      "durationMs": {"addBatch": 300, "walCommit": 9, "triggerExecution": 345}})  # fmt: skip
    assert lines[-1] == "batch 10 took 0.3 s (addBatch 0.3 s); 3 rows" and levels[-1] == logging.DEBUG
    runner._on_batch({"name": "sr_STEPS_steps", "batchId": 11, "numInputRows": 3,
                      "durationMs": {"addBatch": 6_000, "triggerExecution": 6_100}})  # fmt: skip
    assert lines[-1] == "batch 11 took 6.1 s (addBatch 6.0 s); 3 rows" and lines.count(lines[-1]) == 1
    assert levels[-1] == logging.INFO  # a slow batch: once, at info, as at any level
    assert committed == [True] * 5  # each of its batches told the entry (not the other query's)
    stream.log.removeHandler(handler)


def test_a_spark_master_in_spark_conf_is_the_master_every_choice_is_made_from(tmp_path: Path) -> None:
    """It wins over --spark-master when the session starts, so the driver's reads, the JVM's
    heap and code generation are chosen for that master, not for the one it replaced."""
    from replicator.config import Config

    def master(spark_conf: dict[str, str], cli: str | None) -> str:
        cfg = Config.model_validate({"name": "dc1", "state_store": str(tmp_path), "spark_conf": spark_conf,
                                     "streams": [{"stream": "S", "source_url": "nats://127.0.0.1:1",
                                                  "target_url": "nats://127.0.0.1:2"}]})  # fmt: skip
        runner = Runner(cfg, cfg.streams, cli)
        try:
            return runner.master
        finally:
            runner.loop.stop()

    assert master({"spark.master": "spark://spark-1:7077"}, "local[2]") == "spark://spark-1:7077"
    assert master({}, "local[2]") == "local[2]"
    assert master({}, None) == "local[*]"


def test_a_leader_that_fails_hands_its_key_over_for_its_retry_wait_and_stands_by() -> None:
    """A leader whose start keeps failing (a refused sampling_buckets, a bad state file) kept
    the key and retried forever, while a peer that could copy stood by."""
    runner, _ = _runner()
    stream = _Stream([])
    stream.election = _Election()
    runner._schedule_retry(stream)  # type: ignore[arg-type]
    wait = runner._retries["S/dc1"].due - time.monotonic()
    assert stream.election.asides and abs(stream.election.asides[0] - wait) < 0.5
    assert stream.stood_by == 1
    runner._schedule_retry(stream)  # failing again while standing by: nothing more to give up
    assert len(stream.election.asides) == 1 and stream.stood_by == 1


def test_a_leader_owing_copies_left_in_flight_keeps_the_key_and_retries() -> None:
    """A failed batch leaves its copies in flight (maybe with a gap, on an R3 target): only this
    instance's catch_up publishes them; a peer would continue after the target's last copy,
    past the gap. So it keeps the lead until they are settled."""
    runner, _ = _runner()
    stream = _Stream([])
    stream.election = _Election()
    stream.in_flight = True
    runner._schedule_retry(stream)  # type: ignore[arg-type]
    assert stream.election.asides == [] and stream.stood_by == 0 and "S/dc1" in runner._retries
    stream.in_flight = False  # the retry's catch_up settled them; its start then failed
    runner._schedule_retry(stream)  # type: ignore[arg-type]
    assert len(stream.election.asides) == 1 and stream.stood_by == 1
