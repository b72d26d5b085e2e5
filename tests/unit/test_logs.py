"""Log lines an operator and a log shipper can read: each says which stream it is about, JSON
on request, and the JVM's start-up chatter dropped unless debugging."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from replicator.logs import setup_logging, stream_logger
from replicator.spark.jvm_log import JvmOutput, classify


class Captured:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def getvalue(self) -> str:
        return self.capsys.readouterr().err


@pytest.fixture
def captured(capsys: pytest.CaptureFixture[str]) -> Iterator[Captured]:
    root = logging.getLogger()
    before = (root.handlers[:], root.level)
    yield Captured(capsys)
    root.handlers[:], root.level = before[0], before[1]


def test_text_lines_name_the_stream_they_are_about(captured: Captured) -> None:
    setup_logging("info", "", "text")
    stream_logger("replicator.runner", "ORDERS/dc1").info("copied %d", 5)
    logging.getLogger("replicator.runner").info("stopped")
    first, second = captured.getvalue().splitlines()
    assert first.endswith(" INFO replicator.runner: ORDERS/dc1: copied 5")
    assert second.endswith(" INFO replicator.runner: stopped")


def test_json_lines_carry_the_stream_as_a_field(captured: Captured) -> None:
    setup_logging("info", "", "json")
    stream_logger("replicator.runner", "ORDERS/dc1").warning("lag %d", 7)
    logging.getLogger("spark").error("Executor: lost")
    first, second = (json.loads(line) for line in captured.getvalue().splitlines())
    assert {k: first[k] for k in ("level", "logger", "stream", "message")} == {
        "level": "WARNING",
        "logger": "replicator.runner",
        "stream": "ORDERS/dc1",
        "message": "lag 7",
    }
    assert first["time"]
    assert second["stream"] is None and second["message"] == "Executor: lost"
    assert set(first) == {"time", "level", "logger", "stream", "message"}


def test_debug_lines_are_kept_only_at_debug(captured: Captured) -> None:
    setup_logging("info")
    stream_logger("x", "S/n").debug("hidden")
    setup_logging("debug")
    stream_logger("x", "S/n").debug("shown")
    out = captured.getvalue()
    assert out.count("S/n:") == 1 and "shown" in out


@pytest.mark.parametrize(
    "line",
    [
        "WARNING: Using incubator modules: jdk.incubator.vector",
        'Setting default log level to "WARN".',
        "To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use setLogLevel(newLevel).",
        'Setting Spark log level to "ERROR".',
        "   ",
    ],
)
def test_the_jvms_start_up_chatter_is_dropped_unless_debugging(line: str) -> None:
    assert classify(line + "\n", quiet=True) is None
    if line.strip():
        assert classify(line, quiet=False) == (logging.WARNING, line)


def test_spark_log_lines_keep_their_level_and_logger() -> None:
    ours = "2026-11-23 18:41:47,503 ERROR spark.Executor: Exception in task 0.0\n"
    assert classify(ours, quiet=True) == (logging.ERROR, "Executor: Exception in task 0.0")
    default = "26/11/23 18:41:47 WARN Utils: Your hostname resolves to a loopback address"
    assert classify(default, quiet=False) == (
        logging.WARNING,
        "Utils: Your hostname resolves to a loopback address",
    )


def test_anything_else_the_jvm_prints_is_shown_as_a_warning() -> None:
    trace = "\tat org.apache.spark.scheduler.Task.run(Task.scala:147)"
    assert classify(trace, quiet=True) == (logging.WARNING, trace)
    assert classify("Traceback (most recent call last):", quiet=True) == (
        logging.WARNING,
        "Traceback (most recent call last):",
    )


def test_a_failed_batchs_stack_trace_is_left_to_debug_other_traces_are_shown() -> None:
    """The replicator logs a failed batch's reason in one line; Spark's stack trace of it is
    noise unless debugging. A trace after any other record still shows."""
    failed = [
        "2026-11-23 21:40:30,552 ERROR spark.MicroBatchExecution: Query sr_S [id = 8b99] terminated with error",
        "org.apache.spark.sql.execution.streaming.sources.ForeachBatchUserFuncException: [FOREACH_BATCH_USER_FUNCTION_ERROR]",
        "\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(ForeachBatchSink.scala:56)",
        "\t... 34 more",
    ]
    other = [
        "2026-11-23 21:40:31,000 ERROR spark.DAGScheduler: Failed to update accumulator",
        "\tat org.apache.spark.scheduler.Task.run(Task.scala:147)",
    ]
    quiet = JvmOutput(quiet=True)
    got = [quiet.classify(line) for line in failed + other]
    assert got[0] is not None and got[0][0] == logging.DEBUG
    assert got[1:4] == [None, None, None]
    assert got[4:] == [
        (logging.ERROR, "DAGScheduler: Failed to update accumulator"),
        (logging.WARNING, other[1]),
    ]
    task = "2026-11-23 22:30:45,400 ERROR spark.Executor: Exception in task 0.0 in stage 3.0 (TID 3)"
    assert quiet.classify(task) == (logging.DEBUG, "Executor: Exception in task 0.0 in stage 3.0 (TID 3)")
    loud = JvmOutput(quiet=False)
    assert all(loud.classify(line) is not None for line in failed)


def test_a_query_threads_death_is_one_line_unless_debugging() -> None:
    died = (
        'Exception in thread "stream execution thread for sr_REG_dc1 [id = 88]" java.lang.StackOverflowError'
    )
    frame = "\tat java.base/java.util.regex.Pattern$Loop.match(Pattern.java:4898)"
    quiet = JvmOutput(quiet=True)
    assert quiet.classify(died) == (logging.WARNING, died)
    assert [quiet.classify(frame) for _ in range(3)] == [None, None, None]
    assert JvmOutput(quiet=False).classify(frame) == (logging.WARNING, frame)


DAEMON_BROKEN_PIPE = [
    "Traceback (most recent call last):",
    '  File "/v/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/daemon.py", line 264, in manager',
    '  File "/v/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/daemon.py", line 95, in worker',
    "BrokenPipeError: [Errno 32] Broken pipe",
]


# The same through the daemon the session starts task workers with (replicator.spark.daemon).
OUR_DAEMON_BROKEN_PIPE = [
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "/v/lib/python3.11/site-packages/replicator/spark/daemon.py", line 43, in <module>',
    '  File "/v/lib/python3.11/site-packages/pyspark/daemon.py", line 264, in manager',
    '  File "/v/lib/python3.11/site-packages/replicator/spark/daemon.py", line 31, in worker',
    '  File "/v/lib/python3.11/site-packages/pyspark/daemon.py", line 95, in worker',
    "BrokenPipeError: [Errno 32] Broken pipe",
]


@pytest.mark.parametrize("traceback", [DAEMON_BROKEN_PIPE, OUR_DAEMON_BROKEN_PIPE], ids=["pyspark", "ours"])
def test_a_cancelled_tasks_closed_pipe_in_sparks_daemon_is_one_debug_line(traceback: list[str]) -> None:
    quiet = JvmOutput(quiet=True)
    got = [out for line in traceback for out in quiet.feed(line + "\n")]
    assert got == [
        (
            logging.DEBUG,
            "a Spark Python process found its pipe to the JVM closed (BrokenPipeError: [Errno 32] Broken pipe)",
        )
    ]
    loud = JvmOutput(quiet=False)
    assert [text for line in traceback for _, text in loud.feed(line)] == traceback


def test_any_other_python_traceback_is_shown_whole() -> None:
    block = [
        "Traceback (most recent call last):",
        '  File "/work/replicator/spark/sink.py", line 10, in publish',
        "    raise ValueError('x')",
        "ValueError: x",
    ]
    quiet = JvmOutput(quiet=True)
    got = [out for line in block for out in quiet.feed(line)]
    assert got == [(logging.WARNING, line) for line in block]
    cut_short = JvmOutput(quiet=True)
    assert cut_short.feed(block[0]) == [] and cut_short.flush() == [(logging.DEBUG, block[0])]


def test_a_cancelled_tasks_arrow_leak_check_is_left_to_debug() -> None:
    """Seen when the runner stopped a query whose task was turning rows into Arrow: Arrow's
    leak check on the cancelled task's buffers, two records and a stack trace."""
    lines = [
        "2026-11-24 20:07:51,694 ERROR spark.BaseAllocator: Memory was leaked by query. Memory leaked: (1344512)",
        "Allocator(toArrowBatchIterator) 0/1344512/1868800/9223372036854775807 (res/actual/peak/limit)",
        "2026-11-24 20:07:51,705 ERROR spark.TaskContextImpl: Error in TaskCompletionListener",
        "java.lang.IllegalStateException: Memory was leaked by query. Memory leaked: (1344512)",
        "\tat org.apache.arrow.memory.BaseAllocator.close(BaseAllocator.java:504)",
    ]
    quiet = JvmOutput(quiet=True)
    out = [o for line in lines for o in quiet.feed(line)]
    assert [level for level, _ in out] == [logging.DEBUG, logging.DEBUG]
    shown = JvmOutput(quiet=False)
    loud = [o for line in lines for o in shown.feed(line)]
    assert [level for level, _ in loud] == [
        logging.ERROR,
        logging.WARNING,
        logging.ERROR,
        logging.WARNING,
        logging.WARNING,
    ]


def test_a_traceback_header_cut_short_by_another_record_is_left_to_debug() -> None:
    """Seen once in a test run: a lone header, then Spark's record of the failed batch."""
    lines = [
        "Traceback (most recent call last):",
        "2026-11-24 23:26:38,660 ERROR spark.MicroBatchExecution: Query sr_S [id = 8b99] terminated with error",
        "\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(ForeachBatchSink.scala:56)",
    ]
    quiet = JvmOutput(quiet=True)
    out = [o for line in lines for o in quiet.feed(line)]
    assert [level for level, _ in out] == [logging.DEBUG, logging.DEBUG]
    shown = JvmOutput(quiet=False)
    loud = [o for line in lines for o in shown.feed(line)]
    assert [level for level, _ in loud] == [logging.WARNING, logging.ERROR, logging.WARNING]
    assert loud[0][1] == lines[0]


def test_a_traceback_header_followed_by_a_java_stack_is_left_to_debug() -> None:
    """Two streams' batches failing the same second: one process's lone header, then the tab-
    indented frames of the other's dropped Java stack, then its next record."""
    lines = [
        "2026-11-24 23:26:38,660 ERROR spark.MicroBatchExecution: Query sr_S [id = 8b99] terminated with error",
        "Traceback (most recent call last):",
        "\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(ForeachBatchSink.scala:56)",
        "\tat org.apache.spark.sql.execution.streaming.MicroBatchExecution.runBatch(MicroBatchExecution.scala:900)",
        "2026-11-24 23:26:38,700 INFO spark.MicroBatchExecution: Starting new streaming query.",
    ]
    quiet = JvmOutput(quiet=True)
    out = [o for line in lines for o in quiet.feed(line)]
    assert [level for level, _ in out] == [logging.DEBUG, logging.DEBUG, logging.INFO]
    assert not any("Traceback" in text for level, text in out if level > logging.DEBUG)


# The runner started through replicator.spark.source_runner: its frames come between runpy's.
SOURCE_RUNNER_FRAMES = [
    '  File "/v/lib/python3.11/site-packages/replicator/spark/source_runner.py", line 66, in <module>',
    "    main(sys.argv)",
    '  File "/v/lib/python3.11/site-packages/replicator/spark/source_runner.py", line 62, in main',
    '    runpy.run_module(module, run_name="__main__", alter_sys=True)',
    '  File "<frozen runpy>", line 226, in run_module',
    '  File "<frozen runpy>", line 98, in _run_module_code',
    '  File "<frozen runpy>", line 88, in _run_code',
]


@pytest.mark.parametrize("stdlib", ["/usr/lib/python3.11", "/usr/lib64/python3.11"], ids=["lib", "lib64"])
@pytest.mark.parametrize("started_by", ["pyspark", "ours"])
def test_a_stopped_querys_source_runner_finding_its_pipe_closed_is_left_to_debug(
    started_by: str, stdlib: str
) -> None:
    """Seen in a full run when a failing batch's query was stopped: the planner of the Python
    data source (pyspark's streaming source runner) found its socket closed, three chained
    tracebacks (blank lines between them, as the JVM prints them). The standard library's frames
    are where the interpreter keeps it: /usr/lib64 on Red Hat's and Fedora's Pythons."""
    ours = SOURCE_RUNNER_FRAMES if started_by == "ours" else []
    lines = [
        "Traceback (most recent call last):",
        '  File "/v/lib/python3.11/site-packages/pyspark/sql/streaming/python_streaming_source_runner.py", line 265, in main',
        "    func_id = read_int(infile)",
        "              ^^^^^^^^^^^^^^^^",
        '  File "/v/lib/python3.11/site-packages/pyspark/serializers.py", line 602, in read_int',
        "    length = stream.read(4)",
        "             ^^^^^^^^^^^^^^",
        '  File "/usr/lib/python3.11/socket.py", line 706, in readinto',
        "    return self._sock.recv_into(b)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^",
        "ConnectionResetError: [Errno 104] Connection reset by peer",
        "During handling of the above exception, another exception occurred:",
        "Traceback (most recent call last):",
        '  File "/v/lib/python3.11/site-packages/pyspark/worker_util.py", line 253, in get_sock_file_to_executor',
        "    yield sock_file",
        '  File "/v/lib/python3.11/site-packages/pyspark/sql/streaming/python_streaming_source_runner.py", line 314, in <module>',
        "    main(sock_file, sock_file)",
        '  File "/v/lib/python3.11/site-packages/pyspark/sql/streaming/python_streaming_source_runner.py", line 299, in main',
        "    outfile.flush()",
        '  File "/usr/lib/python3.11/socket.py", line 724, in write',
        "    return self._sock.send(b)",
        "           ^^^^^^^^^^^^^^^^^^",
        "BrokenPipeError: [Errno 32] Broken pipe",
        "During handling of the above exception, another exception occurred:",
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
        *ours,
        '  File "/v/lib/python3.11/site-packages/pyspark/sql/streaming/python_streaming_source_runner.py", line 313, in <module>',
        "    with get_sock_file_to_executor(timeout=None) as sock_file:",
        '  File "/usr/lib/python3.11/contextlib.py", line 158, in __exit__',
        "    self.gen.throw(typ, value, traceback)",
        '  File "/v/lib/python3.11/site-packages/pyspark/worker_util.py", line 255, in get_sock_file_to_executor',
        "    sock_file.close()",
        '  File "/usr/lib/python3.11/socket.py", line 724, in write',
        "    return self._sock.send(b)",
        "           ^^^^^^^^^^^^^^^^^^",
        "BrokenPipeError: [Errno 32] Broken pipe",
    ]
    lines = [line.replace("/usr/lib/python3.11", stdlib) for line in lines]
    quiet = JvmOutput(quiet=True)
    printed = [x for line in lines for x in (["", line, ""] if line.startswith("During") else [line])]
    out = [o for line in printed for o in quiet.feed(line)]
    assert [level for level, _ in out] == [logging.DEBUG] * len(out), out
    assert out[0] == (
        logging.DEBUG,
        "a Spark Python process found its pipe to the JVM closed "
        "(ConnectionResetError: [Errno 104] Connection reset by peer)",
    )
    shown = JvmOutput(quiet=False)
    assert any(level == logging.WARNING for line in lines for level, _ in shown.feed(line))


def test_a_source_runner_started_as_its_query_stopped_is_left_to_debug() -> None:
    """Seen in a full run with copy_live on (test_faults, target cut): a failed live copy stopped
    the query half a second after its start, and the planner's process, starting, found the JVM's
    socket file gone: two chained tracebacks, every frame pyspark's, ours or the standard library's."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/v/lib/python3.11/site-packages/pyspark/util.py", line 822, in local_connect_and_auth',
        "    sock.connect(sock_path)",
        "FileNotFoundError: [Errno 2] No such file or directory",
        "During handling of the above exception, another exception occurred:",
        "Traceback (most recent call last):",
        *SOURCE_RUNNER_FRAMES,
        '  File "/v/lib/python3.11/site-packages/pyspark/sql/streaming/python_streaming_source_runner.py", line 313, in <module>',
        "    with get_sock_file_to_executor(timeout=None) as sock_file:",
        '  File "/usr/lib/python3.11/contextlib.py", line 137, in __enter__',
        "    return next(self.gen)",
        "           ^^^^^^^^^^^^^^",
        '  File "/v/lib/python3.11/site-packages/pyspark/worker_util.py", line 246, in get_sock_file_to_executor',
        "    sock_file, sock = local_connect_and_auth(conn_info, auth_secret)",
        '  File "/v/lib/python3.11/site-packages/pyspark/util.py", line 828, in local_connect_and_auth',
        "    raise PySparkRuntimeError(",
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [CANNOT_OPEN_SOCKET] Can not open socket: tried to "
        "connect to /tmp/.e54a59ce.sock, but an error occurred: [Errno 2] No such file or directory.",
    ]
    quiet = JvmOutput(quiet=True)
    printed = [x for line in lines for x in (["", line, ""] if line.startswith("During") else [line])]
    out = [o for line in printed for o in quiet.feed(line)]
    assert [level for level, _ in out] == [logging.DEBUG] * len(out), out
    shown = JvmOutput(quiet=False)
    assert any(level == logging.WARNING for line in lines for level, _ in shown.feed(line))


def test_a_read_planner_started_as_its_query_stopped_is_left_to_debug() -> None:
    """Seen in CI (test_faults, an R3 target cut): the planner step of a query start, started
    through replicator.spark.read_planner, found the JVM's socket file gone as the query stopped."""
    lines = [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
        '  File "/work/replicator/spark/read_planner.py", line 76, in <module>',
        "    main(sys.argv)",
        '  File "/work/replicator/spark/read_planner.py", line 72, in main',
        "    exec(code, main_module.__dict__)",
        '  File "/v/lib/python3.11/site-packages/pyspark/sql/worker/plan_data_source_read.py", line 393, in <module>',
        "    with get_sock_file_to_executor() as sock_file:",
        '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/contextlib.py", line 137, in __enter__',
        "    return next(self.gen)",
        "           ^^^^^^^^^^^^^^",
        '  File "/v/lib/python3.11/site-packages/pyspark/worker_util.py", line 246, in get_sock_file_to_executor',
        "    sock_file, sock = local_connect_and_auth(conn_info, auth_secret)",
        "                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/v/lib/python3.11/site-packages/pyspark/util.py", line 828, in local_connect_and_auth',
        "    raise PySparkRuntimeError(",
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [CANNOT_OPEN_SOCKET] Can not open socket: tried to connect to /tmp/.cf64b8c0-9ad5-41ec-8100-311bafbb24a3.sock, but an error occurred: [Errno 2] No such file or directory.",
    ]
    quiet = JvmOutput(quiet=True)
    printed = [x for line in lines for x in (["", line, ""] if line.startswith("During") else [line])]
    out = [o for line in printed for o in quiet.feed(line)]
    assert [level for level, _ in out] == [logging.DEBUG] * len(out), out


@pytest.mark.parametrize(
    "frame",
    [
        '  File "/work/replicator/spark/datasource.py", line 10, in read',  # our own code
        '  File "/v/lib/python3.11/site-packages/pyspark/files.py", line 10, in get',  # pyspark's, elsewhere
        '  File "/usr/lib/python3.11/tempfile.py", line 10, in mkstemp',  # Spark's temporary files removed
    ],
)
def test_a_missing_file_anywhere_but_the_connect_to_the_jvm_is_still_shown(frame: str) -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 88, in _run_code',
        frame,
        "    open(path)",
        "FileNotFoundError: [Errno 2] No such file or directory: 'x'",
    ]
    quiet = JvmOutput(quiet=True)
    out = [o for line in lines for o in quiet.feed(line)]
    assert any(level == logging.WARNING for level, _ in out), out


def test_a_source_runners_traceback_cut_mid_line_by_sparks_record_is_left_to_debug() -> None:
    """Seen in CI (test_target_refusals, r3): the planner's closed-pipe traceback was cut
    mid-word by Spark's "terminated with error" record, and the failed batch's Java stack
    followed. Unsplit, the record went unrecognised and the whole stack was shown."""
    record = (
        "2026-11-27 13:21:51,835 ERROR spark.MicroBatchExecution: Query sr_S_narrow [id = 9435] "
        "terminated with error"
    )
    lines = [
        "Traceback (most recent call last):",
        '  File "/v/lib/python3.11/site-packages/pyspark/worker_util.py", line 253, in get_sock_file_to_executor',
        "    yield sock_file",
        '  File "/v/lib/python3.11/site-packages/pyspark/sql/streaming/python_streaming_source_runner.py", line 299, in main',
        "    outfile.flush()",
        '  File "/usr/lib/python3.11/socket.py", line 724, in write',
        "    ret" + record,
        "org.apache.spark.sql.execution.streaming.sources.ForeachBatchUserFuncException: [FOREACH_BATCH_USER_FUNCTION_ERROR] "
        "Return Message: Traceback (most recent call last):",
        '  File "/v/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy',
        "replicator.nats.publisher.PublishError: source sequence 2001 would be copied to subject n.s.b.5",
        "\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(ForeachBatchSink.scala:60)",
        "\t... 34 more",
        "2026-11-27 13:21:51,924 INFO spark.MicroBatchExecution: Starting new streaming query.",
        "BrokenPipeError: [Errno 32] Broken pipe",
    ]
    quiet = JvmOutput(quiet=True)
    out = [o for line in lines for o in quiet.feed(line + "\n")]
    assert [level for level, _ in out] == [logging.DEBUG, logging.DEBUG, logging.INFO, logging.DEBUG], out
    assert out[0][1] == (
        "a Spark Python process's traceback was cut short "
        '(File "/usr/lib/python3.11/socket.py", line 724, in write)'
    )
    assert out[1] == (logging.DEBUG, record.split(" spark.", 1)[1])
    shown = JvmOutput(quiet=False)
    loud = [o for line in lines for o in shown.feed(line)]
    assert (logging.ERROR, record.split(" spark.", 1)[1]) in loud
    assert (logging.WARNING, lines[0]) in loud and (logging.WARNING, "    ret") in loud


def _source_runner_cut_at(line: int, runner: str | None = None) -> list[str]:
    """The last of the planner's chained tracebacks as CI's log showed it (test_faults, target
    unreachable, 2026-12-06): cut short by a record of the failed batch at the runner's
    module-level frame, ours and runpy's before it. `runner`: the runner's file named in it
    (the installed one unless given)."""
    runner = runner or _installed_runner()
    return [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
        '  File "/tmp/ci.9EPV/p/replicator/spark/source_runner.py", line 64, in <module>',
        "    main(sys.argv)",
        '  File "/tmp/ci.9EPV/p/replicator/spark/source_runner.py", line 60, in main',
        '    runpy.run_module(module, run_name="__main__", alter_sys=True)',
        '  File "<frozen runpy>", line 226, in run_module',
        '  File "<frozen runpy>", line 98, in _run_module_code',
        '  File "<frozen runpy>", line 88, in _run_code',
        f'  File "{runner}", line {line}, in <module>',
        "2026-12-06 06:20:55,938 ERROR spark.MicroBatchExecution: Query sr_REG_dc1 [id = 77] terminated with error",
        "\tat org.apache.spark.sql.execution.streaming.MicroBatchExecution.runBatch(MicroBatchExecution.scala:900)",
    ]


def _installed_runner() -> str:
    import pyspark.sql.streaming.python_streaming_source_runner as runner

    return str(runner.__file__)


def _runner_socket_line() -> int:
    """The installed runner's module-level line that opens its socket (pyspark 4.3.0: 313); the
    line after it calls its main."""
    with open(_installed_runner(), encoding="utf-8") as source:
        text = source.read().splitlines()
    (n,) = [i for i, x in enumerate(text, 1) if x.strip().startswith("with get_sock_file_to_executor(")]
    assert text[n].strip() == "main(sock_file, sock_file)"
    return n


def test_a_source_runners_traceback_cut_where_it_opens_its_socket_is_left_to_debug() -> None:
    """At that frame the runner only opens or closes its socket to the JVM: cut there, it is the
    closed pipe of a stopped query, whose exception line may follow."""
    lines = [*_source_runner_cut_at(_runner_socket_line()), "BrokenPipeError: [Errno 32] Broken pipe"]
    quiet = JvmOutput(quiet=True)
    out = [o for line in lines for o in quiet.feed(line + "\n")]
    assert [level for level, _ in out] == [logging.DEBUG] * len(out), out
    assert out[0][1].startswith("a Spark Python process's traceback was cut short (File ")
    shown = JvmOutput(quiet=False)
    assert (logging.WARNING, lines[0]) in [o for line in lines for o in shown.feed(line)]


@pytest.mark.parametrize(
    ("at", "runner"),
    [
        ("its main", None),
        ("a runner that cannot be read", "/nowhere/pyspark/sql/streaming/python_streaming_source_runner.py"),
    ],
)
def test_a_source_runners_traceback_cut_elsewhere_is_shown(at: str, runner: str | None) -> None:
    """The line after the socket's calls the runner's main, which reaches the data source's
    reader (the replicator's code): a traceback cut there may be the replicator's own. So may
    one whose runner's line cannot be read."""
    line = _runner_socket_line() + (1 if runner is None else 0)
    lines = _source_runner_cut_at(line, runner)
    quiet = JvmOutput(quiet=True)
    out = [o for line in lines for o in quiet.feed(line)]
    assert out[0] == (logging.WARNING, lines[0]) and (logging.WARNING, lines[-3]) in out


def test_a_source_runners_traceback_cut_before_any_frame_past_its_start_is_left_to_debug() -> None:
    """Seen in CI (test_faults, an R3 target's leader restarted, 2026-12-06): the planner's
    traceback cut short at the replicator's source_runner frames that start it, runpy's before
    them. It says where nothing was raised, as a lone header does; cut one frame later, into the
    runner itself, it is judged by that frame."""
    lines = _source_runner_cut_at(0)
    start = lines[:7]  # the header, runpy's frames and source_runner's, as CI's log showed them
    cut = [*start, *lines[-2:]]
    quiet = JvmOutput(quiet=True)
    out = [o for line in cut for o in quiet.feed(line)]
    assert [level for level, _ in out] == [logging.DEBUG] * len(out), out
    assert out[0][1].startswith("a Spark Python process's traceback was cut short (File ")
    shown = JvmOutput(quiet=False)
    assert (logging.WARNING, lines[0]) in [o for line in cut for o in shown.feed(line)]
    # Past the start, into runpy's run of the module and then the runner's main: shown.
    past = [
        *lines[:-3],
        f'  File "{_installed_runner()}", line {_runner_socket_line() + 1}, in <module>',
        *lines[-2:],
    ]
    quiet = JvmOutput(quiet=True)
    out = [o for line in past for o in quiet.feed(line)]
    assert out[0] == (logging.WARNING, lines[0]), out


def test_a_record_glued_to_the_end_of_another_line_is_split() -> None:
    quiet = JvmOutput(quiet=True)
    glued = "some JVM notice2026-11-27 13:21:51,835 WARN spark.Utils: a warning"
    assert quiet.feed(glued) == [(logging.WARNING, "some JVM notice"), (logging.WARNING, "Utils: a warning")]
    replicator_frames = [
        "Traceback (most recent call last):",
        '  File "/work/replicator/spark/sink.py", line 10, in publish',
        "    raise Val2026-11-27 13:21:51,835 INFO spark.Executor: ran",
    ]
    out = [o for line in replicator_frames for o in quiet.feed(line)]
    # The replicator's own traceback is shown even when cut short.
    assert out[:3] == [(logging.WARNING, x) for x in [*replicator_frames[:2], "    raise Val"]]
    assert out[3] == (logging.INFO, "Executor: ran")


def test_a_traceback_through_the_replicators_code_cut_by_a_record_is_shown() -> None:
    """A worker's traceback starts with pyspark's frames and reaches the replicator's later: one
    cut before those (by a record of the failed task) is not pyspark's closed pipe."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/v/lib/python3.11/site-packages/pyspark/worker.py", line 2000, in main',
        "    process()",
        "2026-11-27 13:21:51,835 ERROR spark.Executor: Exception in task 0.0 in stage 3.0 (TID 3)",
    ]
    quiet = JvmOutput(quiet=True)
    out = [o for line in lines for o in quiet.feed(line)]
    assert out[:3] == [(logging.WARNING, x) for x in lines[:3]]
    # The closed pipe's shortcut is not armed by it: a closed pipe line after the failed task's
    # stack (dropped with its record) is shown.
    assert quiet.feed("2026-11-27 13:21:52,000 INFO spark.A: next") == [(logging.INFO, "A: next")]
    assert quiet.feed("BrokenPipeError: [Errno 32] Broken pipe") == [
        (logging.WARNING, "BrokenPipeError: [Errno 32] Broken pipe")
    ]


def test_a_closed_pipe_long_after_a_cut_traceback_is_shown() -> None:
    quiet = JvmOutput(quiet=True)
    cut = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/socket.py", line 724, in write',
        "    ret2026-11-27 13:21:51,835 INFO spark.A: one",
    ]
    assert [level for line in cut for level, _ in quiet.feed(line)] == [logging.DEBUG, logging.INFO]
    for n in ("two", "three"):
        quiet.feed(f"2026-11-27 13:21:52,000 INFO spark.A: {n}")
    assert quiet.feed("EOFError") == [(logging.WARNING, "EOFError")]


def test_a_line_of_many_glued_records_is_split_without_recursing() -> None:
    record = "2026-11-27 13:21:51,835 INFO spark.A: x"
    out = JvmOutput(quiet=True).feed("head" + record * 5000)
    assert out[0] == (logging.WARNING, "head") and out[1:] == [(logging.INFO, "A: x")] * 5000
