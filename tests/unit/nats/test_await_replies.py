"""A read whose connection drops fails at once instead of waiting out its timeout."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from replicator.nats.readers import ReadInterrupted, await_replies


def _conn() -> SimpleNamespace:
    return SimpleNamespace(is_connected=True, stats={"reconnects": 0})


def test_replies_arriving_end_the_wait() -> None:
    async def main() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.4, done.set_result, None)
        await await_replies(_conn(), done, 5, "direct get")  # type: ignore[arg-type]

    asyncio.run(main())


@pytest.mark.parametrize("drop", ["disconnected", "reconnected"])
def test_a_connection_lost_meanwhile_fails_the_read_at_once(drop: str) -> None:
    nc = _conn()

    def lose() -> None:
        if drop == "disconnected":
            nc.is_connected = False
        else:
            nc.stats["reconnects"] += 1  # down and up again: the replies sent meanwhile are gone

    async def main() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.3, lose)
        await await_replies(nc, done, 30, "direct get of stream REG from 7")  # type: ignore[arg-type]

    started = time.monotonic()
    with pytest.raises(ReadInterrupted, match="direct get of stream REG from 7: the connection was lost"):
        asyncio.run(main())
    assert time.monotonic() - started < 5  # not the 30 s timeout


def test_no_answer_times_out_naming_the_request() -> None:
    async def main() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await await_replies(_conn(), done, 0.5, "pull from consumer C of stream REG")  # type: ignore[arg-type]

    with pytest.raises(TimeoutError, match=r"pull from consumer C of stream REG: no reply for 0\.5 s"):
        asyncio.run(main())
