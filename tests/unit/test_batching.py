"""Batch sizing (the data source's admission control) and the runner's one-line error reasons."""

from __future__ import annotations

from replicator.runner import _first_line
from replicator.spark.datasource import BatchRamp


def test_batches_start_small_and_double_with_every_full_batch_up_to_the_cap() -> None:
    ramp = BatchRamp(first=2000, cap=10_000)
    begin, ends = 1, []
    for _ in range(5):
        end = ramp.end(begin, 100_001, 10_000)
        ends.append(end - begin)
        begin = end
    assert ends == [2000, 4000, 8000, 10_000, 10_000]
    assert ramp.end(begin, begin + 300, 10_000) == begin + 300  # caught up: what there is
    # ...and a later backlog is read at full size at once (no shrinking, see BatchRamp).
    assert ramp.end(begin + 300, begin + 100_000, 10_000) == begin + 300 + 10_000


def test_spark_read_limit_and_cap_bound_every_batch() -> None:
    assert BatchRamp(first=5000, cap=1000).end(1, 10_000, 10_000) == 1001
    assert BatchRamp(first=2000, cap=10_000).end(1, 10_000, 500) == 501
    assert BatchRamp(first=2000, cap=10_000).end(7, 7, 10_000) == 7  # nothing new


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
    assert _first_line(ValueError("plain reason\nmore")) == "plain reason"
    assert _first_line(RuntimeError()) == "RuntimeError"
