"""The loop thread that synchronous code drives nats-py connections through."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import time

import pytest

from replicator.aio import LoopThread
from replicator.nats.connect import open_connection


def test_a_call_that_times_out_is_cancelled_and_leaves_no_connection_behind() -> None:
    """A connection attempt given up by its caller must not connect later, an orphan client
    nobody closes (issue 28, hole 9). The peer accepts TCP and never answers, as a server
    behind a half-open link does."""
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    loop = LoopThread("test-aio")
    try:
        with pytest.raises(concurrent.futures.TimeoutError):
            loop.run(open_connection(f"nats://127.0.0.1:{port}", name="given-up"), 0.5)
        deadline = time.monotonic() + 10

        async def tasks_left() -> int:
            return len(asyncio.all_tasks()) - 1  # this one

        while (left := loop.run(tasks_left(), 5)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == 0, "the connection attempt is still running after its caller gave up"
    finally:
        loop.stop()
        silent.close()
