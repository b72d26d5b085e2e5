"""`answered`: a setup step tried again while JetStream does not answer, and only then."""

from __future__ import annotations

import asyncio
import logging

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import APIError, ServiceUnavailableError

from replicator.nats.jetstream import answered
from replicator.nats.readers import RangeNotHeld, ReadInterrupted


def test_a_step_is_tried_again_while_jetstream_does_not_answer(caplog: pytest.LogCaptureFixture) -> None:
    failures: list[Exception] = [
        NoRespondersError(),
        NatsTimeoutError(),
        TimeoutError(),  # a read's replies not all in (await_replies)
        ServiceUnavailableError(),
        RangeNotHeld("a leader just elected"),
        ReadInterrupted("the connection was lost"),
    ]

    async def step() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    with caplog.at_level(logging.INFO):
        assert asyncio.run(answered(step, "nats://t:4222", interval=0.01)) == "done"
    waiting = [r.getMessage() for r in caplog.records if "not answering" in r.getMessage()]
    assert len(waiting) == 1 and "nats://t:4222" in waiting[0]  # logged once, not per try
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_an_answer_that_is_a_refusal_is_raised_at_once() -> None:
    tries = []

    async def step() -> None:
        tries.append(1)
        raise APIError(code=400, err_code=10058, description="stream name already in use")

    with pytest.raises(APIError):
        asyncio.run(answered(step, "t", interval=0.01))
    assert len(tries) == 1


def test_a_503_that_says_jetstream_is_off_is_raised_at_once() -> None:
    async def step() -> None:
        raise ServiceUnavailableError(
            code=503, err_code=10039, description="jetstream not enabled for account"
        )

    with pytest.raises(ServiceUnavailableError):
        asyncio.run(answered(step, "t", interval=0.01))


def test_a_stop_ends_the_wait() -> None:
    async def step() -> None:
        raise NoRespondersError

    stops = iter([False, False, True])
    assert asyncio.run(answered(step, "t", lambda: next(stops), interval=0.01)) is None
