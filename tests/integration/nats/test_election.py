"""Stepping aside, on a real server's election bucket: a leader that cannot copy hands the key to
a peer (deleted, not left to expire), no sooner than its guard, and campaigns again only after
its pause; alone, it leads again after the pause."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import nats
import pytest
from helpers import run
from nats.js.api import KeyValueConfig
from nats_servers import NatsCluster

from replicator.election import BUCKET, Election

KEY = "SR_dc1_REG"
TTL_S = 5.0


async def _until(
    pred: Callable[[], bool], timeout: float, what: str, never: Callable[[], bool] = lambda: False
) -> None:
    """Until `pred`, checking meanwhile that `never` does not hold."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert not never(), f"while waiting for {what}"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.02)


async def _candidate(url: str, name: str) -> tuple[Election, asyncio.Task[None], nats.NATS]:
    nc = await nats.connect(url.split(","), name=f"test-election-{name}")
    election = Election(nc, KEY, name, f"REG/{name}")
    return election, asyncio.create_task(election.run()), nc


async def _stop(election: Election, task: asyncio.Task[None], nc: nats.NATS) -> None:
    election.stop()
    await asyncio.wait_for(task, 10)
    await nc.close()


@pytest.mark.parametrize(
    ("ttl", "pause"), [(5.0, 4.0), (15.0, 2.0)], ids=["pause-past-guard", "guard-past-pause"]
)
def test_a_leader_stepping_aside_hands_the_key_to_a_peer_after_its_guard(
    nats_server: NatsCluster, ttl: float, pause: float
) -> None:
    async def go() -> None:
        nc = await nats.connect(nats_server.url.split(","))
        kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=BUCKET, ttl=ttl, history=64))
        a, a_run, a_nc = await _candidate(nats_server.url, "a")
        await _until(a.leading, 30, "a leading")
        b, b_run, b_nc = await _candidate(nats_server.url, "b")
        await asyncio.sleep(1.5)
        assert not b.leading()  # one leader at a time
        assert a.lease is not None
        guard = a.lease.guard

        asked = time.monotonic()
        a.step_aside(pause)
        # Its sinks refuse at once, and it leads no more until the key has passed to b, also
        # when its guard (a fifth of the TTL) outlasts its pause.
        await _until(b.leading, 30, "b leading", never=a.leading)
        assert time.monotonic() - asked >= guard  # copies a had sent had the guard to land
        # Handed over: a deleted its key (an expiry leaves no delete marker), then b created it
        # (and may have renewed it since).
        ops = [(e.operation, e.value) for e in await kv.history(KEY)]
        gone = ops.index(("DEL", b""))
        assert (
            {v for _, v in ops[:gone]} == {b"a"}
            and ops[gone + 1 :]
            and {v for _, v in ops[gone + 1 :]} == {b"b"}
        )

        # b renews: a, campaigning again after its pause, does not take the key back.
        tries = a.campaigns
        await _until(lambda: a.campaigns >= tries + 2, 30, "a campaigning again", never=a.leading)
        assert b.leading()
        await _stop(b, b_run, b_nc)  # b gives the key up: a leads again
        await _until(a.leading, 30, "a leading again after b's stop")
        await _stop(a, a_run, a_nc)
        await nc.close()

    run(go())


def test_a_leader_alone_leads_again_after_its_pause(nats_server: NatsCluster) -> None:
    async def go() -> None:
        nc = await nats.connect(nats_server.url.split(","))
        await nc.jetstream().create_key_value(KeyValueConfig(bucket=BUCKET, ttl=TTL_S))
        a, a_run, a_nc = await _candidate(nats_server.url, "a")
        await _until(a.leading, 30, "a leading")
        assert a.lease is not None
        guard = a.lease.guard
        asked = time.monotonic()
        a.step_aside(3.0)
        a.step_aside(3.0)  # asked twice (two entries' failures): one hand-over
        assert not a.leading()
        await _until(a.leading, 60, "a leading again")
        assert time.monotonic() - asked >= guard + 3.0  # the pause counts from the key's deletion
        assert a.wins == 2
        await _stop(a, a_run, a_nc)
        await nc.close()

    run(go())


def test_a_win_after_the_bucket_was_created_again_takes_its_new_ttl(nats_server: NatsCluster) -> None:
    """A lease of the old TTL would outlive a key created under a shorter one: a peer could win
    it while this instance still publishes."""

    async def go() -> None:
        nc = await nats.connect(nats_server.url.split(","))
        js = nc.jetstream()
        await js.create_key_value(KeyValueConfig(bucket=BUCKET, ttl=10.0))
        a, a_run, a_nc = await _candidate(nats_server.url, "a")
        await _until(a.leading, 30, "a leading")
        await js.delete_key_value(BUCKET)
        await js.create_key_value(KeyValueConfig(bucket=BUCKET, ttl=2.0))
        await _until(lambda: a.wins == 2 and a.leading(), 60, "a winning the new bucket's key")
        assert a.lease is not None and a.lease.ttl == 2.0
        await _stop(a, a_run, a_nc)
        await nc.close()

    run(go())
