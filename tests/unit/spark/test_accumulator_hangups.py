"""The driver's accumulator server (pyspark's own, on a Unix socket as the session sets it up)
when the JVM hangs up on it: no traceback on stderr (replicator.spark.internals)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from pyspark import accumulators

from replicator.spark.internals import accumulator_hangups_quiet


def _hang_up_on_the_server(path: Path) -> None:
    server = accumulators._start_update_server("", True, str(path))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as jvm_side:
            jvm_side.connect(str(path))
        time.sleep(0.5)  # the server's handler polls, finds the hang-up and reads past the end
    finally:
        server.shutdown()


def test_the_jvm_hanging_up_its_accumulator_connection_prints_no_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = accumulators.UpdateRequestHandler
    # pyspark's own handler, also where an earlier test in this process started a session
    # (which applied the change); what was there is put back after the test.
    monkeypatch.setattr(handler, "handle", getattr(handler.handle, "sr_wrapped", handler.handle))
    _hang_up_on_the_server(tmp_path / "plain.sock")
    assert "EOFError" in capfd.readouterr().err, "pyspark's own handler: nothing here was tested"
    assert accumulator_hangups_quiet()
    assert accumulator_hangups_quiet(), "applied twice: still one wrapper"
    _hang_up_on_the_server(tmp_path / "quiet.sock")
    assert capfd.readouterr().err == ""
