"""The JVM's console output (Spark's log4j lines, the JVM's own notices, Python workers'
stderr) read from a pipe and passed on through Python's logging: it then goes where the
replicator's own lines go (`logfile`, `log_format: json`), and start-up chatter that means
nothing to an operator is dropped unless `loglevel: debug`."""

from __future__ import annotations

import linecache
import logging
import re
import threading
from typing import IO

log = logging.getLogger("spark")

# Printed by the JVM or Spark on every start, whatever the log configuration says.
_CHATTER = (
    re.compile(r"^WARNING: Using incubator modules"),
    re.compile(r"^Setting default log level to "),
    re.compile(r"^To adjust logging level use sc\.setLogLevel"),
    re.compile(r'^Setting Spark log level to "'),
)
# Spark's log4j patterns: ours (log4j2-quiet.properties) and Spark's default one.
_LOG4J_PREFIX = (
    r"(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ |\d\d/\d\d/\d\d \d\d:\d\d:\d\d )"
    r"(?P<level>ERROR|WARN|INFO|DEBUG|TRACE|FATAL) "
)
_LOG4J_LINE = re.compile(rf"^{_LOG4J_PREFIX}(?:spark\.)?(?P<logger>[\w.$-]+): (?P<message>.*)$")
# The same record's start anywhere in a line: two processes share the JVM's stderr, so a record
# can begin in the middle of another process's line (seen: a Python traceback cut mid-word by
# Spark's "terminated with error" record, which then went unrecognised).
_LOG4J_START = re.compile(_LOG4J_PREFIX)
_LEVELS = {
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": logging.DEBUG,
}


# A batch that failed (our foreachBatch raised, or a read task did: a server went away): the
# replicator logs the reason in one line and retries, so Spark's copies of it (Java stack traces
# wrapping the Python one) are noise unless debugging.
# A task cancelled while it turned rows into Arrow (the runner stopped a query mid-batch) trips
# Arrow's leak check on the buffers it held: two error records and a stack trace, same story.
_BATCH_FAILED = re.compile(
    r"terminated with error|FOREACH_BATCH_USER_FUNCTION_ERROR|Exception in task|Lost task|"
    r"failed \d+ times?; aborting job|Memory was leaked by query|Error in TaskCompletionListener"
)


_QUERY_THREAD_DIED = 'Exception in thread "stream execution thread'


# A Python process of Spark's whose query was stopped (the runner stopped it mid-batch, or
# to retry a failed batch) finds its pipe to the JVM closed: pyspark's daemon (a task's worker)
# or its streaming source runner (the planner of a Python data source) prints the traceback.
_PYTHON_TRACEBACK = "Traceback (most recent call last):"
_WORKER_PIPE_CLOSED = re.compile(
    r"^(BrokenPipeError|ConnectionResetError|EOFError)\b"
    r"|^pyspark\.errors\.exceptions\.base\.PySparkRuntimeError: \[CANNOT_OPEN_SOCKET\]"
)
# A streaming source runner started just as its query was stopped finds the JVM's socket file
# gone: FileNotFoundError in pyspark's connect to it (then CANNOT_OPEN_SOCKET, chained to it).
# Only there: a file missing anywhere else is shown.
_SOCKET_GONE = re.compile(r"^FileNotFoundError\b")
_CONNECT_FRAME = re.compile(r'^\s+File ".*/pyspark/util\.py", line \d+, in local_connect_and_auth$')
# The standard library's directory: lib64 on Red Hat's and Fedora's Pythons.
_STDLIB = r".*/lib(?:64)?/python3\.\d+/"
# Frames of pyspark itself, of the modules that start pyspark's task workers' daemon and its
# streaming source runner (replicator.spark.daemon, replicator.spark.source_runner), of the
# Python standard library (socket, contextlib) or frozen modules (runpy): nothing of the
# replicator's own work. Such a traceback that ends in a closed pipe is pyspark's own, and so
# are the sentences that chain one to the next.
_DAEMON_FRAME = re.compile(
    r'^\s+File "(.*/pyspark/.*|.*/replicator/spark/(daemon|source_runner|read_planner)\.py'
    rf'|{_STDLIB}[^/]+\.py|<frozen [^>]+>)"'
)
# pyspark's reads and writes on its socket to the JVM: where a closed pipe is found.
_SOCKET_FRAME = re.compile(rf'^\s+File "{_STDLIB}socket\.py", line \d+, in (write|readinto)$')
_CUT_SHORT_LINES = 3
_CHAINED = re.compile(r"^(During handling of the above exception|The above exception was the direct cause)")
# The streaming source runner's module-level frame. At its `with get_sock_file_to_executor(...)`
# line it only opens and closes its socket to the JVM (pyspark's and the standard library's code);
# at the next line it calls its main, which reaches the data source's reader: the replicator's code.
_RUNNER_MODULE_FRAME = re.compile(
    r'^\s+File "(?P<path>.*/pyspark/sql/streaming/python_streaming_source_runner\.py)", '
    r"line (?P<line>\d+), in <module>$"
)


# The frames every traceback of the source runner or the workers' daemon starts with: runpy's
# and the replicator's modules that start them. A traceback cut short before any other frame
# says where nothing was raised, no more than a lone header does.
_ENTRY_FRAME = re.compile(
    r'^\s+File "(.*/replicator/spark/(daemon|source_runner|read_planner)\.py|<frozen runpy>)"'
)


def _cut_in_runners_socket(last_frame: str) -> bool:
    """Whether `last_frame` is the runner's module-level line that opens its socket, read from the
    file the frame names (a file that cannot be read says no: the traceback is shown)."""
    m = _RUNNER_MODULE_FRAME.match(last_frame)
    return m is not None and linecache.getline(m["path"], int(m["line"])).lstrip().startswith(
        "with get_sock_file_to_executor("
    )


def _pipe_closed_line(exception: str) -> tuple[int, str]:
    return logging.DEBUG, f"a Spark Python process found its pipe to the JVM closed ({exception})"


class JvmOutput:
    """Classifies the JVM's lines one after another: a stack trace that follows a record being
    dropped is dropped with it."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._dropping = False
        self._traceback: list[str] | None = None
        self._pipe_closed = False  # the last traceback was pyspark's closed pipe
        # Lines left in which the closed pipe of a traceback of pyspark's cut short may follow.
        self._cut_short = 0

    def feed(self, line: str) -> list[tuple[int, str]]:
        """What to log for the next line: a Python traceback is held until its last line, and a
        cancelled task's closed pipe in pyspark's daemon becomes one debug line."""
        line = line.rstrip("\r\n")
        starts = [m.start() for m in _LOG4J_START.finditer(line, 1)]
        if not starts:
            return self._feed_line(line)
        # Records glued to what came before them: each is a line of its own, and the part before
        # a record is a line cut short.
        out: list[tuple[int, str]] = []
        bounds = [0, *starts, len(line)]
        for i in range(len(bounds) - 1):
            piece = line[bounds[i] : bounds[i + 1]]
            if i == 0 and self._traceback is not None:
                self._traceback.append(piece)
                out += self._end_traceback(cut=True)
            else:
                out += self._feed_line(piece)
        return out

    def _feed_line(self, line: str) -> list[tuple[int, str]]:
        if self._traceback is None:
            if line.startswith(_PYTHON_TRACEBACK):
                self._traceback, self._cut_short = [line], 0
                return []
            if self.quiet and self._pipe_closed and _CHAINED.match(line):
                return [(logging.DEBUG, line)]
            if self.quiet and self._cut_short and _WORKER_PIPE_CLOSED.match(line):
                self._cut_short = 0
                return [_pipe_closed_line(line)]
            if line.strip():
                self._pipe_closed = False
            out = self.classify(line)
            if out is not None and out[0] > logging.DEBUG:
                self._cut_short = max(0, self._cut_short - 1)  # counts the lines an operator sees
            return [out] if out is not None else []
        if _LOG4J_LINE.match(line):
            # Another record cut the traceback short; the record stands on its own.
            return [*self._end_traceback(cut=True), *self._feed_line(line)]
        self._traceback.append(line)
        if line[:1].isspace():
            return []
        return self._end_traceback()

    def _end_traceback(self, cut: bool = False) -> list[tuple[int, str]]:
        block, self._traceback = self._traceback or [], None
        frames = [x for x in (block[1:] if cut else block[1:-1]) if x.lstrip().startswith("File ")]
        if (
            self.quiet
            and cut
            and frames
            and all(_DAEMON_FRAME.match(f) for f in frames)
            and (
                _SOCKET_FRAME.match(frames[-1])
                or _cut_in_runners_socket(frames[-1])
                or all(_ENTRY_FRAME.match(f) for f in frames)
            )
        ):
            # Cut short inside pyspark's own socket I/O to the JVM, or where the source runner
            # opens or closes its socket, every frame pyspark's or the standard library's: a Spark
            # Python process finding its pipe closed as its query ended. (A traceback through the
            # replicator's code has its frames between those, so one cut before them is shown.)
            # Or cut before any frame past the process's start: like a lone header, it says
            # nothing (seen in CI as the query of an R3 target's failed batch was stopped).
            # Its exception's line, if it comes within the next few lines shown, goes to debug too;
            # whatever it was, a fault that lasts shows again in the query's own error.
            self._cut_short = _CUT_SHORT_LINES
            return [
                (logging.DEBUG, f"a Spark Python process's traceback was cut short ({frames[-1].strip()})")
            ]
        if self.quiet and not frames:
            # A header without a single frame: cut short by another record (seen in test runs
            # when two streams' batches failed the same second and the output of processes
            # interleaved; a Java stack's tab-indented lines may follow it), or by the end of
            # the output. It says nothing; the lines after it are classified on their own.
            return [(logging.DEBUG, block[0]), *[o for x in block[1:] if (o := self.classify(x)) is not None]]
        if (
            self.quiet
            and frames
            and all(_DAEMON_FRAME.match(f) for f in frames)
            and (
                _WORKER_PIPE_CLOSED.match(block[-1])
                or (_SOCKET_GONE.match(block[-1]) and _CONNECT_FRAME.match(frames[-1]))
            )
        ):
            self._pipe_closed = True
            return [_pipe_closed_line(block[-1])]
        return [out for x in block if (out := self.classify(x)) is not None]

    def flush(self) -> list[tuple[int, str]]:
        """Whatever a traceback cut short by the end of the output held."""
        return self._end_traceback() if self._traceback is not None else []

    def classify(self, line: str) -> tuple[int, str] | None:
        out = classify(line, self.quiet)
        if out is None or not self.quiet:
            return out
        if line.startswith(_QUERY_THREAD_DIED):
            # Seen once when a query was stopped under a failing batch (a StackOverflowError in
            # Spark's regex code, a thousand frames deep): the runner restarts the query; the
            # one line says what happened, the frames are left to debug.
            self._dropping = True
            return out
        if _LOG4J_LINE.match(line.rstrip("\r\n")):
            self._dropping = bool(_BATCH_FAILED.search(line))
            return (logging.DEBUG, out[1]) if self._dropping else out
        return None if self._dropping else out


def classify(line: str, quiet: bool) -> tuple[int, str] | None:
    """The level and text to log for one line of JVM output; None to drop it."""
    line = line.rstrip("\r\n")
    if not line.strip():
        return None
    if quiet and any(p.match(line) for p in _CHATTER):
        return None
    m = _LOG4J_LINE.match(line)
    if m:
        return _LEVELS[m["level"]], f"{m['logger']}: {m['message']}"
    # A stack trace's lines, a Python worker's traceback, a JVM notice: shown as they are.
    return logging.WARNING, line


def forward_jvm_output(stream: IO[bytes], quiet: bool) -> threading.Thread:
    """Start a daemon thread that logs each line of `stream` until it closes."""

    lines = JvmOutput(quiet)

    def _pump() -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                for out in lines.feed(raw.decode("utf-8", "replace")):
                    log.log(*out)
            for out in lines.flush():
                log.log(*out)

    t = threading.Thread(target=_pump, name="jvm-output", daemon=True)
    t.start()
    return t
