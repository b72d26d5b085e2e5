"""The runner's one-line error reasons."""

from __future__ import annotations

from replicator.runner import _first_line


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
