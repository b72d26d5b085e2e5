"""Stepping aside, on a real election bucket (one server, and an R3 bucket on a 3-server
cluster): a leader that cannot copy hands the key to a peer (deleted, not left to expire), no
sooner than its guard, and campaigns again only after its pause; alone, it leads again after the
pause. On the cluster, also while the server the leader is connected to restarts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import nats
import pytest
from helpers import run
from nats.js.api import KeyValueConfig
from nats.js.errors import NoKeysError
from nats_servers import NatsCluster, nats_cluster

from harness.faultproxy import FaultProxy
from replicator.election import BUCKET, Election

KEY = "SR_dc1_REG"
TTL_S = 5.0


@pytest.fixture(params=[1, 3], ids=["single", "r3"])
def election_servers(request: pytest.FixtureRequest) -> Iterator[tuple[NatsCluster, int]]:
    """The source side as production runs it either way: one server, or a 3-server cluster
    whose election bucket keeps 3 replicas. Yields the cluster and the bucket's replicas."""
    with nats_cluster(request.param, "dc1") as c:
        yield c, request.param


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


async def _history(kv: Any, key: str) -> list[tuple[str | None, bytes | None]]:
    """(operation, value) of each of `key`'s entries. nats-py's history can report no keys
    when the entries arrived before its watcher counted them (nats.py issue 842, in 2.16 still):
    asked again for up to 3 s, so a history truly empty still fails."""
    deadline = time.monotonic() + 3
    while True:
        try:
            return [(e.operation, e.value) for e in await kv.history(key)]
        except NoKeysError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _candidate(
    url: str, name: str, first: str | None = None, **connect: Any
) -> tuple[Election, asyncio.Task[None], nats.NATS]:
    """A candidate connected to every server of `url`, to `first` first when given (so two
    candidates of a cluster talk to different servers)."""
    urls = url.split(",")
    if first is not None:
        urls = [first] + [u for u in urls if u != first]
    nc = await nats.connect(urls, name=f"test-election-{name}", dont_randomize=first is not None, **connect)
    election = Election(nc, KEY, name, f"REG/{name}")
    return election, asyncio.create_task(election.run()), nc


async def _peer_keeps_the_key_till_it_stops(
    a: Election,
    peer: tuple[Election, asyncio.Task[None], nats.NATS],
    while_b_leads: Callable[[], bool],
    after: Callable[[], bool] = lambda: False,
) -> None:
    """The closing steps of a hand-over from `a` to its peer b: a campaigns again after its
    pause and does not take the key back (checking `while_b_leads` does not hold meanwhile);
    once b stops and gives the key up, a leads again (checking `after`)."""
    b = peer[0]
    tries = a.campaigns
    await _until(lambda: a.campaigns >= tries + 2, 60, "a campaigning again", never=while_b_leads)
    assert b.leading()
    await _stop(*peer)
    await _until(a.leading, 60, "a leading again after b's stop", never=after)


async def _stop(election: Election, task: asyncio.Task[None], nc: nats.NATS) -> None:
    election.stop()
    await asyncio.wait_for(task, 10)
    await nc.close()


@pytest.mark.parametrize(
    ("ttl", "pause"), [(5.0, 4.0), (15.0, 2.0)], ids=["pause-past-guard", "guard-past-pause"]
)
def test_a_leader_stepping_aside_hands_the_key_to_a_peer_after_its_guard(
    election_servers: tuple[NatsCluster, int], ttl: float, pause: float
) -> None:
    servers, replicas = election_servers
    urls = [s.url for s in servers.servers]

    async def go() -> None:
        nc = await nats.connect(servers.url.split(","))
        kv = await nc.jetstream().create_key_value(
            KeyValueConfig(bucket=BUCKET, ttl=ttl, history=64, replicas=replicas)
        )
        a, a_run, a_nc = await _candidate(servers.url, "a", first=urls[0])
        await _until(a.leading, 30, "a leading")
        b, b_run, b_nc = await _candidate(servers.url, "b", first=urls[-1])
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
        ops = await _history(kv, KEY)
        gone = ops.index(("DEL", b""))
        assert (
            {v for _, v in ops[:gone]} == {b"a"}
            and ops[gone + 1 :]
            and {v for _, v in ops[gone + 1 :]} == {b"b"}
        )

        await _peer_keeps_the_key_till_it_stops(a, (b, b_run, b_nc), while_b_leads=a.leading)
        await _stop(a, a_run, a_nc)
        await nc.close()

    run(go())


@pytest.mark.parametrize(("pause", "waited"), [(3.0, 3.0), (1.0, 2.0)], ids=["3s", "1s-taken-as-2s"])
def test_a_leader_alone_leads_again_after_its_pause(
    election_servers: tuple[NatsCluster, int], pause: float, waited: float
) -> None:
    """A pause shorter than 2 s (the runner's first backoff is 1 s) is taken as 2 s
    (operations.md: "at least 2 s"), so a peer asking every second can win the key first."""
    servers, replicas = election_servers

    async def go() -> None:
        nc = await nats.connect(servers.url.split(","))
        await nc.jetstream().create_key_value(KeyValueConfig(bucket=BUCKET, ttl=TTL_S, replicas=replicas))
        a, a_run, a_nc = await _candidate(servers.url, "a")
        await _until(a.leading, 30, "a leading")
        assert a.lease is not None
        guard = a.lease.guard
        asked = time.monotonic()
        a.step_aside(pause)
        a.step_aside(pause)  # asked twice (two entries' failures): one hand-over
        assert not a.leading()
        await _until(a.leading, 60, "a leading again")
        assert time.monotonic() - asked >= guard + waited  # the pause counts from the key's deletion
        assert a.wins == 2
        await _stop(a, a_run, a_nc)
        await nc.close()

    run(go())


def test_a_win_after_the_bucket_was_created_again_takes_its_new_ttl(
    election_servers: tuple[NatsCluster, int],
) -> None:
    """A lease of the old TTL would outlive a key created under a shorter one: a peer could win
    it while this instance still publishes."""

    servers, replicas = election_servers

    async def go() -> None:
        nc = await nats.connect(servers.url.split(","))
        js = nc.jetstream()
        await js.create_key_value(KeyValueConfig(bucket=BUCKET, ttl=10.0, replicas=replicas))
        a, a_run, a_nc = await _candidate(servers.url, "a")
        await _until(a.leading, 30, "a leading")
        await js.delete_key_value(BUCKET)
        await js.create_key_value(KeyValueConfig(bucket=BUCKET, ttl=2.0, replicas=replicas))
        await _until(lambda: a.wins == 2 and a.leading(), 60, "a winning the new bucket's key")
        assert a.lease is not None and a.lease.ttl == 2.0
        await _stop(a, a_run, a_nc)
        await nc.close()

    run(go())


async def _never_both(a: Election, b: Election) -> None:
    """Fails the moment both lead (each from its own clock, as their sinks would see it)."""
    while True:
        assert not (a.leading() and b.leading()), "two leaders at once"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("fault", ["restart", "half-open"])
def test_a_leader_stepping_aside_as_its_server_goes_away_never_leads_beside_its_peer(
    source_cluster: NatsCluster, fault: str
) -> None:
    """A rolling restart reaches the server the leader talks to just as it steps aside, or its
    link to that server goes half-open (nothing passes: the deletion times out, the key is left
    to expire, and the leader reconnects to another server in a few seconds). The peer, on
    another server, leads no sooner than the guard after the ask; the two never lead at once;
    the old leader does not win the key back when it expires (before the fix its pause counted
    from the failed deletion, so it campaigned beside the peer when the key expired); it leads
    again only once the peer gives the key up."""
    servers = source_cluster.servers

    async def go() -> None:
        nc = await nats.connect(servers[-1].url)
        # A TTL long enough that the key outlives a pause counted from a failed deletion.
        kv = await nc.jetstream().create_key_value(
            KeyValueConfig(bucket=BUCKET, ttl=10.0, replicas=3, history=64)
        )
        with FaultProxy(servers[0].port) as link:
            # Through the proxy first; pings every second notice a dead link in a few seconds
            # (then the client goes to a server it learnt from the cluster).
            a, a_run, a_nc = await _candidate(
                f"{link.url},{source_cluster.url}",
                "a",
                first=link.url,
                ping_interval=1,
                max_outstanding_pings=2,
            )
            await _until(a.leading, 30, "a leading")
            b, b_run, b_nc = await _candidate(source_cluster.url, "b", first=servers[-1].url)
            watch = asyncio.create_task(_never_both(a, b))
            await asyncio.sleep(1.5)
            assert not b.leading()
            assert a.lease is not None and a_nc.connected_url is not None
            assert a_nc.connected_url.port == link.port
            guard = a.lease.guard

            asked = time.monotonic()
            a.step_aside(2.0)
            if fault == "restart":
                await asyncio.to_thread(servers[0].stop)
            else:
                link.half_open()
            await _until(b.leading, 60, "b leading", never=watch.done)
            assert time.monotonic() - asked >= guard
            if fault == "half-open":  # the deletion never arrived: the key expired
                assert ("DEL", b"") not in await _history(kv, KEY)
            if fault == "restart":
                await asyncio.to_thread(servers[0].start)
            else:
                link.restore()

            await _peer_keeps_the_key_till_it_stops(
                a, (b, b_run, b_nc), while_b_leads=watch.done, after=watch.done
            )
            assert not watch.done()
            watch.cancel()
            await _stop(a, a_run, a_nc)
        await nc.close()

    run(go())


def test_a_ttl_shortened_in_place_shortens_the_lease_at_the_next_renewal(
    election_servers: tuple[NatsCluster, int],
) -> None:
    """An operator edits the bucket's max age from 10 s to 3 s: a lease of the old TTL (valid
    8 s after a renewal) would outlive a key that now expires 3 s after it, and a peer could
    win the key while this instance publishes."""
    servers, replicas = election_servers

    async def go() -> None:
        nc = await nats.connect(servers.url.split(","))
        js = nc.jetstream()
        await js.create_key_value(KeyValueConfig(bucket=BUCKET, ttl=10.0, replicas=replicas))
        a, a_run, a_nc = await _candidate(servers.url, "a")
        await _until(a.leading, 30, "a leading")
        config = (await js.stream_info(f"KV_{BUCKET}")).config
        config.max_age = config.duplicate_window = 3.0  # the window may not outlast the age
        await js.update_stream(config)
        await _until(lambda: a.lease is not None and a.lease.ttl == 3.0, 30, "a's lease following the TTL")
        assert a.lease is not None and a.lease.guard == 0.6
        # It keeps the key under the new TTL: renewals come often enough for it.
        wins = a.wins
        await asyncio.sleep(4.0)
        assert a.leading() and a.wins == wins
        await _stop(a, a_run, a_nc)
        await nc.close()

    run(go())


def test_a_bucket_whose_ttl_is_outside_1_s_to_1_h_is_refused_and_the_bounds_are_taken(nats_server) -> None:
    """operations.md: a bucket without a TTL, or with one outside 1 s to 1 h, is refused (a dead
    leader's key must expire), in a line that says how to create it; 1 s and 1 h are taken."""
    from replicator.election import BucketMissing

    async def verdict(ttl: float) -> float | str:
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream()
            await js.create_key_value(KeyValueConfig(bucket=BUCKET, ttl=ttl))
            try:
                return await Election._ttl(await js.key_value(BUCKET))
            except BucketMissing as e:
                return str(e)
            finally:
                await js.delete_key_value(BUCKET)
        finally:
            await nc.close()

    for ttl in (0, 0.5, 3601, 7200):
        refused = run(verdict(ttl))
        assert isinstance(refused, str) and "it needs one from 1 s to 3600 s" in refused, (ttl, refused)
        assert "nats kv add CHORIA_LEADER_ELECTION --ttl 10s" in refused
    assert [run(verdict(ttl)) for ttl in (1, 3600)] == [1.0, 3600.0]
