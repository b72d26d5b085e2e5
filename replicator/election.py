"""Leader election per stream entry, on the source cluster's KV bucket CHORIA_LEADER_ELECTION.

The protocol is the Choria Stream Replicator's, so instances of either campaign against each
other: the key is `SR_<entry name>_<stream>`, and its holder is the leader. A candidate wins by
creating the key (it fails while the key exists); the leader keeps it by updating it against its
last revision, several times per bucket TTL. A leader that dies stops updating; the bucket's TTL
(its max age) then removes the key and a candidate's next create wins. A leader that stops
cleanly deletes the key so a standby takes over at once. A leader that cannot copy the entry
(its query will not start, its take-over fails; replicator.runner asks only when it owes no
copies) steps aside: it stops publishing, gives the key up a guard's time later and campaigns
again only after a pause, so a peer that can copy leads.

Safety: a leader publishes only while its `Lease` holds, which ends `guard` seconds before
anyone else could win the key (the TTL after the last renewal it sent; the TTL is read again
after each win and renewal, so a bucket whose TTL was shortened shortens the lease). Spark's query is stopped
when the lease ends, but the sinks check the lease before each publish, so a query still
stopping cannot publish under another leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

BUCKET = "CHORIA_LEADER_ELECTION"
# The TTLs the bucket may have (Choria's limits): renewals need time to land well within it.
MIN_TTL_S, MAX_TTL_S = 1.0, 3600.0
# A candidate asks every second (one small request): a dead leader's key is taken at most a
# second after the bucket removed it.
CANDIDATE_INTERVAL_S = 1.0
# Missing bucket or unreachable servers: said again at most this often.
COMPLAINT_INTERVAL_S = 30.0


def election_key(entry_name: str, stream: str) -> str:
    """The key the Go original campaigns on for a stream entry: `SR_<name>_<stream>`. (Its
    prefix test is `HasPrefix("SR_", name)`, so a name that is itself a prefix of `SR_`, such
    as `SR`, is used bare; kept so both campaign on the same key.)"""
    cname = entry_name if "SR_".startswith(entry_name) else f"SR_{entry_name}"
    return f"{cname}_{stream}"


@dataclass
class Lease:
    """Whether this instance may publish as the leader, from its own clock: it holds until
    `ttl - guard` seconds after the last renewal that the server accepted was sent."""

    ttl: float
    guard: float
    renewed_at: float | None = None  # time.monotonic() when the last accepted renewal was sent

    @classmethod
    def for_ttl(cls, ttl: float) -> Lease:
        # A fifth of the TTL (at least 0.5 s) for a publish in flight to land before another
        # instance can win.
        return cls(ttl=ttl, guard=max(0.5, ttl / 5))

    @property
    def renew_every(self) -> float:
        """Four renewals per lease: three in a row can fail before it ends."""
        return max(0.25, (self.ttl - self.guard) / 4)

    def renewed(self, sent_at: float) -> None:
        self.renewed_at = sent_at

    def lost(self) -> None:
        self.renewed_at = None

    def holds(self, now: float | None = None) -> bool:
        if self.renewed_at is None:
            return False
        now = time.monotonic() if now is None else now
        return now < self.renewed_at + self.ttl - self.guard


class BucketMissing(RuntimeError):
    pass


class Election:
    """Campaigns for one key on an asyncio loop; `leading()` is safe from any thread."""

    def __init__(
        self,
        nc: Any,  # the source cluster's; None until set, before run()
        key: str,
        value: str,
        label: str,
        on_change: Callable[[bool], None] | None = None,
        replicator: str = "",
    ) -> None:
        self.nc = nc
        self.key = key
        self.value = value.encode()
        self.label = label
        self.on_change = on_change
        self.lease: Lease | None = None
        self.revision: int | None = None
        self._stopping = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_complaint = -COMPLAINT_INTERVAL_S
        # step_aside(): the pause asked for, set until the loop has given the key up (this
        # instance does not lead meanwhile), then the time (monotonic) before which it does
        # not campaign: the pause counts from the key's deletion.
        self._aside_lock = threading.Lock()
        self._aside_asked: float | None = None
        self._aside_until = 0.0
        self._wake = asyncio.Event()
        self._last_write_sent = 0.0  # time.monotonic() when the last create or update was sent
        self.campaigns = 0
        # Times this instance won the key: a caller that saw it lead once can tell a lease lost
        # and won back between two of its looks (a stalled process) from one that held.
        self.wins = 0
        from replicator.metrics import metrics

        m, ids = metrics(), (key, value, replicator)
        self._m_leader = m.election_leader.labels(*ids)
        self._m_interval = m.election_interval.labels(*ids)
        self._m_campaigns = {
            state: m.election_campaigns.labels(key, value, state, replicator)
            for state in ("candidate", "leader")
        }
        self._m_leader.set(0)

    def leading(self) -> bool:
        return self.lease is not None and self.lease.holds() and self._aside_asked is None

    def step_aside(self, pause: float) -> None:
        """This instance cannot copy the entry now (its start or take-over failed): stop leading at
        once, give the key up a guard's time later (copies already sent land first, as when a
        lease runs out) and campaign again only `pause` s from now, at least two of a
        candidate's intervals, so that a peer asking every second wins the key first. Alone, it
        wins the key back after the pause. From any thread."""
        with self._aside_lock:
            self._aside_asked = max(pause, 2 * CANDIDATE_INTERVAL_S, self._aside_asked or 0.0)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _bucket(self) -> Any:
        from nats.js.errors import BucketNotFoundError, NotFoundError

        js = self.nc.jetstream()
        try:
            kv = await js.key_value(BUCKET)
        except (BucketNotFoundError, NotFoundError):
            raise BucketMissing(
                f"leader election: the KV bucket {BUCKET} does not exist on the source cluster: "
                f"create it with a TTL, e.g. `nats kv add {BUCKET} --ttl 10s --replicas 3`; "
                "retrying until it exists"
            ) from None
        return kv, await self._ttl(kv)

    @staticmethod
    async def _ttl(kv: Any) -> float:
        """The bucket's TTL now, refused outside Choria's limits."""
        ttl = (await kv.status()).ttl
        if not ttl or not MIN_TTL_S <= ttl <= MAX_TTL_S:
            raise BucketMissing(
                f"leader election: the KV bucket {BUCKET} has a TTL of {ttl or 'none'}; it needs one "
                f"from {MIN_TTL_S:.0f} s to {MAX_TTL_S:.0f} s (a dead leader's key must expire): "
                f"recreate it, e.g. `nats kv add {BUCKET} --ttl 10s --replicas 3`; retrying"
            )
        return float(ttl)

    def _complain(self, text: str) -> None:
        now = time.monotonic()
        if now - self._last_complaint >= COMPLAINT_INTERVAL_S:
            self._last_complaint = now
            log.error("%s: %s", self.label, text)

    def _set(self, leading: bool) -> None:
        self._m_leader.set(1 if leading else 0)
        if self.on_change is not None:
            self.on_change(leading)

    async def run(self) -> None:
        """Campaign until stop(); then give the key up if held."""
        self._loop = asyncio.get_running_loop()
        kv: Any = None
        while not self._stopping.is_set():
            wait = CANDIDATE_INTERVAL_S
            if self._aside_asked is not None:
                await self._give_up_for_a_while(kv)
                if self._stopping.is_set():
                    break
            try:
                if kv is None:
                    kv, ttl = await self._bucket()
                    self.lease = Lease.for_ttl(ttl)
                    log.info("%s: campaigning for %s in %s (TTL %.0f s)", self.label, self.key, BUCKET, ttl)
                wait = await self._campaign(kv)
            except BucketMissing as e:
                kv = None
                self._complain(str(e))
            except Exception as e:  # servers away: the lease runs out on its own
                self._complain(f"leader election: {type(e).__name__}: {e}; retrying")
            if self.lease is not None and self.revision is not None and not self.lease.holds():
                self._lose("its lease ran out before it could be renewed")
            self._m_interval.set(wait)
            await self._sleep(wait)
        await self._resign(kv)

    async def _sleep(self, seconds: float) -> None:
        """Until `seconds` have passed, stop() or step_aside() asked."""
        self._wake.clear()
        if self._aside_asked is not None:  # asked while the loop was busy (its wake was cleared)
            return
        stopping = asyncio.ensure_future(self._stopping.wait())
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({stopping, woken}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            woken.cancel()

    async def _give_up_for_a_while(self, kv: Any) -> None:
        """step_aside()'s work on the loop: the key is deleted once copies sent before the call
        had the guard's time to land (a stop meanwhile gives it up the same way, in run()), and
        only then may this instance lead again, after the pause."""
        if self.revision is not None and self.lease is not None:
            self._set(False)
            log.warning(
                "%s: stepping aside (it cannot copy now): giving up %s; campaigning again in %.0f s",
                self.label, self.key, self._aside_asked,
            )  # fmt: skip
            # The whole guard, whatever else is asked meanwhile (a stop gives the key up at
            # once: its queries have stopped by then).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.lease.guard)
            # Until then the key is this instance's; a deletion that fails leaves it to expire,
            # a TTL after the last write that may have landed (its answer may have been lost).
            expires = max(self.lease.renewed_at or 0.0, self._last_write_sent) + self.lease.ttl
            if not await self._resign(kv):  # kv is set: a revision is only had through it
                # The pause counts from the key's expiry, or this instance, campaigning as
                # soon as a peer, could win it back before the peer does.
                self._aside_until = expires
        with self._aside_lock:
            pause, self._aside_asked = self._aside_asked or 0.0, None
            self._aside_until = max(self._aside_until, time.monotonic()) + pause

    async def _campaign(self, kv: Any) -> float:
        """One campaign step; returns the seconds until the next."""
        from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

        assert self.lease is not None
        aside = self._aside_until - time.monotonic()
        if self.revision is None and aside > 0:  # stepped aside: a peer may take the key meanwhile
            return min(aside, CANDIDATE_INTERVAL_S)
        self.campaigns += 1
        self._m_campaigns["candidate" if self.revision is None else "leader"].inc()
        sent = self._last_write_sent = time.monotonic()
        if self.revision is None:
            try:
                self.revision = await kv.create(self.key, self.value)
            except (KeyWrongLastSequenceError, KeyNotFoundError):
                # Someone holds it (or its key expired between the client's two steps of a
                # create): ask again in a second.
                return CANDIDATE_INTERVAL_S
            # The lease is the TTL the key was created with: the bucket may have been created
            # again since it was first looked at, with a shorter TTL, under which a lease of
            # the old one would outlive the key (and a peer could win it while this one
            # publishes). Until this answers, the key is held but nothing is published.
            try:
                self.lease = Lease.for_ttl(await self._ttl(kv))
            except Exception:
                # Not leading: give the key back rather than block everyone for its TTL.
                revision, self.revision = self.revision, None
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(kv.delete(self.key, last=revision), 2)
                raise
            self.lease.renewed(sent)
            self.wins += 1
            log.warning("%s: became the leader (%s)", self.label, self.key)
            self._set(True)
            return self.lease.renew_every
        try:
            self.revision = await kv.update(self.key, self.value, last=self.revision)
        except KeyWrongLastSequenceError:
            self._lose("another instance holds the key")
            return CANDIDATE_INTERVAL_S
        self.lease.renewed(sent)
        await self._follow_ttl(kv, sent)
        return self.lease.renew_every

    async def _follow_ttl(self, kv: Any, sent: float) -> None:
        """After each renewal, the bucket's TTL as it is now: one shortened in place (its
        stream's max age edited) expires the key sooner than the lease said, and a peer could
        win it while this instance still publishes. A failed read keeps the lease as it was:
        slow servers must not end it."""
        assert self.lease is not None
        try:
            ttl = await self._ttl(kv)
        except Exception:
            return
        if ttl != self.lease.ttl:
            log.warning("%s: the bucket's TTL is now %.0f s (was %.0f s); the lease follows it", self.label, ttl, self.lease.ttl)  # fmt: skip
            self.lease = Lease.for_ttl(ttl)
            self.lease.renewed(sent)

    def _lose(self, why: str) -> None:
        self.revision = None
        if self.lease is not None:
            self.lease.lost()
        log.warning("%s: lost the leadership (%s); stopped copying", self.label, why)
        self._set(False)

    async def _resign(self, kv: Any) -> bool:
        """Stop leading and delete the key if held: False when the deletion failed (the key
        then expires with its TTL)."""
        if kv is None or self.revision is None:
            return True
        revision, self.revision = self.revision, None
        if self.lease is not None:
            self.lease.lost()
        self._set(False)
        try:
            await asyncio.wait_for(kv.delete(self.key, last=revision), 2)
        except Exception as e:
            log.info("%s: could not delete %s (%s); it expires with the bucket's TTL", self.label, self.key, e)  # fmt: skip
            return False
        log.info("%s: gave up the leadership (%s)", self.label, self.key)
        return True

    def stop(self) -> None:
        """Stop campaigning and give the key up (from any thread)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stopping.set)
