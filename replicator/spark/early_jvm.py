"""Spark's JVM launched on a thread of its own as soon as the config is read, so that its
start (seconds on a small machine) runs beside the rest of the replicator's: importing its
modules, connecting to NATS, waiting for a source stream. `build_session` then waits for it and
starts the session on it, with the same settings (it checks).

`bench.start_bench` side by side (docs/performance.md): the JVM appeared 0.6 s after launch
instead of 1.3 s, but the first copy came only ~4 % sooner, because on 2 cores the JVM's start
and the replicator's own share the CPU. The launch itself is pyspark's
(replicator.spark.session.launch_jvm). A launch that fails stops the run with its error as
before (a setup problem, exit status 2), by then or as soon as the runner next looks while it
waits for a source; a JVM that dies after its launch is `JvmGone`, which the runner ends with
exit status 1, as it does for a JVM that dies under a running session.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time

from replicator.spark.session_args import SessionArgs

log = logging.getLogger(__name__)

# How long a run that ends before its session starts (stopped while it waited for a source, or
# a setup error) waits for a launch still under way, so that the process does not exit in the
# middle of starting a subprocess: with the heartbeats' stop, inside the runner's stop deadline.
ABANDON_WAIT_S = 10.0


class EarlyJvm:
    """A launch of Spark's JVM under way on a thread of its own (see the module docstring)."""

    def __init__(self, args: SessionArgs, settings: dict[str, str]) -> None:
        self.args = args
        self.settings = settings
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._launch, name="launch-spark-jvm", daemon=True)

    @classmethod
    def start(cls, args: SessionArgs) -> EarlyJvm | None:
        """Launch it now; None under spark-submit, whose JVM is already running. What the
        launch imports is imported here, on the calling thread: on a thread of its own, those
        imports shared the interpreter with the caller's and the JVM started no sooner. An
        error on the way is kept and raised by `wait`, where a failed launch was raised before."""
        if "PYSPARK_GATEWAY_PORT" in os.environ:
            return None
        try:
            import pyspark.java_gateway  # noqa: F401

            from replicator.spark.internals import numpy_check_without_pandas
            from replicator.spark.session import embedded_settings

            # Before any call into the JVM (the launch itself makes some): pyspark's argument
            # checks would otherwise import pandas.
            numpy_check_without_pandas()
            early = cls(args, embedded_settings(args))
        except Exception as e:
            early = cls(args, {})
            early.error = e
            return early
        early._thread.start()
        return early

    def _launch(self) -> None:
        from replicator.spark.internals import gateway_process
        from replicator.spark.session import launch_jvm

        started = time.monotonic()
        try:
            launch_jvm(self.args.master, self.args.app_name, self.settings, self.args.quiet)
        except BaseException as e:  # raised again by wait(), on the thread that starts Spark
            self.error = e
            return
        proc = gateway_process()
        log.info(
            "launched Spark's JVM (pid %s) in %.1fs", getattr(proc, "pid", "?"), time.monotonic() - started
        )

    def _launching(self) -> bool:
        return self._thread.is_alive()

    def failed(self) -> BaseException | None:
        """Why the JVM cannot serve a session, once that is known: its launch failed (an error
        that stops the run, as a failed launch did before), or it exited after it (killed
        while the run waited for a source, say: JvmGone). None otherwise."""
        if self._launching():
            return None
        if self.error is not None:
            if isinstance(self.error, RuntimeError | OSError):
                return self.error
            return RuntimeError(
                f"Spark's JVM could not be started: {type(self.error).__name__}: {self.error}"
            )
        from replicator.spark.internals import gateway_process

        proc = gateway_process()
        code = proc.poll() if proc is not None else None
        # Exit status 0: not this JVM's (it runs until this process ends); pyspark accepts a
        # launch script that exits 0 once the JVM it started is up.
        return JvmGone(code) if code not in (None, 0) else None

    def wait(self, args: SessionArgs) -> dict[str, str]:
        """Wait for the launch and give the settings it launched with; raise its error, if it
        failed. `args`: the session about to start on it, which must be the one it was launched
        for (a JVM's options cannot change once it runs)."""
        if args != self.args:
            raise RuntimeError(
                f"Spark's JVM was launched for another session: {_difference(self.args, args)} "
                "(a bug: please report it)"
            )
        if self._thread.ident is not None:
            self._thread.join()
        error = self.failed()
        if error is not None:
            raise error
        return self.settings

    def abandon(self, timeout: float = ABANDON_WAIT_S) -> None:
        """The run ends without a session: let a launch under way finish (bounded), and say
        so if it had failed (the run's own reason to end comes first)."""
        if self._thread.ident is not None:
            self._thread.join(timeout)
        if self._launching():
            log.warning(
                "Spark's JVM was still starting after %.0fs; leaving it to end with this process", timeout
            )
        elif self.error is not None:
            log.warning("Spark's JVM could not have served this run either: %s", self.failed())


class JvmGone(RuntimeError):
    """Spark's JVM exited after its launch, before its session started."""

    def __init__(self, code: int) -> None:
        super().__init__(f"Spark's JVM is gone (exit code {code}) before its session started")


def _difference(launched: SessionArgs, wanted: SessionArgs) -> str:
    return "; ".join(
        f"{f.name} {getattr(launched, f.name)!r} != {getattr(wanted, f.name)!r}"
        for f in dataclasses.fields(launched)
        if getattr(launched, f.name) != getattr(wanted, f.name)
    )
