"""SIGTERM always reaches the runner: its handler takes no lock the interrupted main thread may
hold (replicator.stop_signals)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

# The runner's main loop, caught by SIGTERM inside stop_event.wait() with the event's own lock
# held (between wait's steps): the moment CI's replicator at 9b92b67 hung in, made certain.
_CAUGHT_INSIDE_WAIT = """
import logging, os, signal, sys
logging.basicConfig(level=logging.INFO)
from replicator.config import Config
from replicator.runner import Runner

cfg = Config.model_validate({"name": "dc1", "state_store": sys.argv[1],
                             "streams": [{"stream": "S", "source_url": "nats://127.0.0.1:1",
                                          "target_url": "nats://127.0.0.1:2"}]})
runner = Runner(cfg, cfg.streams)
runner.install_stop_signals()
with runner.stop_event._cond:
    os.kill(os.getpid(), signal.SIG{name})
    steps = sum(range(1000))  # the handler runs at one of these steps, the lock still held
print("stop requested:", runner.stop_event.wait(30), flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("name", ["TERM", "INT"])
def test_a_stop_signal_caught_inside_the_main_loops_wait_stops_the_runner(tmp_path: Path, name: str) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CAUGHT_INSIDE_WAIT.replace("{name}", name), str(tmp_path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"SIG{name} deadlocked the runner's main thread: {e.stdout!r} {e.stderr!r}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stop requested: True", (done.stdout, done.stderr)
    assert "stop requested; finishing the current batches" in done.stderr


def test_stop_signals_are_installed_on_the_main_thread_only(tmp_path: Path) -> None:
    """Python allows handlers only there: a runner driven from another thread keeps its
    caller's handlers, rather than failing."""
    import threading

    from replicator.stop_signals import StopSignals

    before = signal.getsignal(signal.SIGTERM)
    calls: list[int] = []
    relay = StopSignals(lambda: calls.append(1))
    worker = threading.Thread(target=relay.install)
    worker.start()
    worker.join()
    assert signal.getsignal(signal.SIGTERM) is before


# Signalled while the interpreter tears its modules down (after Python has given every signal
# it handled its default action back), as the replicator's exit after "stopped" is.
_SIGNALLED_AS_IT_EXITS = """
import os, sys, time
from replicator.stop_signals import StopSignals

relay = StopSignals(int)  # (a lambda would keep this module alive past the teardown)
relay.install()
relay.ignore_after_stop()


class Exiting:
    def __del__(self, write=os.write, sleep=time.sleep):
        write(1, b"exiting\\n")
        sleep(3)


keep = Exiting()
sys.exit(0)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_while_the_interpreter_exits_after_the_stop_keeps_exit_0(sig: signal.Signals) -> None:
    """A second Ctrl-C as the process exits after a clean stop must not end it as a kill
    (exit -2), as a test pressing it every 50 ms found it did."""
    child = subprocess.Popen([sys.executable, "-c", _SIGNALLED_AS_IT_EXITS], stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline() == b"exiting\n"
    child.send_signal(sig)
    assert child.wait(60) == 0
