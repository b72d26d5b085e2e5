"""A one-shot signal that something was published on a stream's subjects.

A caught-up entry's planner would otherwise ask the stream where it ends every few milliseconds
(Spark asks again 10 ms after a plan with nothing new): that polling costs CPU in the JVM, the
planner and the server while nothing happens, and a new message still waits for the next ask.
Armed, the doorbell holds a core subscription on each of the stream's subjects that the server
removes after its first message, so it carries one message per quiet spell, never the stream's
traffic. A ring says only "look again": the stream itself says what it holds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

from replicator.nats.client import SUBSCRIPTION_DENIED, SUBSCRIPTIONS_EXCEEDED
from replicator.subjects import subject_matches

# What the planner's own requests and their replies travel on: a stream whose subjects cover
# them (`>`) would ring the bell with every plan's own ask.
_OWN_TRAFFIC = (
    "_INBOX.a",
    "_INBOX.a.b",
    "$JS.API.STREAM.INFO.a",
    "$JS.API.DIRECT.GET.a",
    "$JS.API.STREAM.MSG.GET.a",
)


def hears_its_own_asks(subjects: Sequence[str]) -> bool:
    return any(subject_matches(own, s) for s in subjects for own in _OWN_TRAFFIC)


def bell_subjects(info: Any, filter_subject: str | None) -> list[str]:
    """What a doorbell for a stream's new messages listens on (`info`: its STREAM.INFO): the
    entry's filter (a ring for a message it does not copy would only ask the stream again),
    else the stream's subjects; none (no bell can ring) for a stream fed by
    mirroring or sourcing, or whose subjects cover our own requests."""
    fed = info.config.mirror is not None or bool(info.config.sources)
    subjects = [filter_subject] if filter_subject else list(info.config.subjects or [])
    return [] if fed or hears_its_own_asks(subjects) else subjects


class DoorbellRefused(Exception):
    """The server refused the doorbell's subscriptions (no permission to subscribe to the
    stream's subjects, or the user's or account's subscription limit): arming again would be
    refused again, and a limit's refusal closes the connection."""


def _refusal(nc: Any, before: BaseException | None) -> str | None:
    """The server's refusal of a subscription since `before` was the connection's last error."""
    err = nc.last_error
    if err is None or err is before:
        return None
    text = str(err)
    return text if text.startswith(SUBSCRIPTION_DENIED) or SUBSCRIPTIONS_EXCEEDED in text.lower() else None


class Doorbell:
    def __init__(self, subjects: Sequence[str]) -> None:
        self.subjects = list(subjects)
        self.rang = threading.Event()  # set on the connection's loop, waited on by the planner
        self._subs: list[Any] = []
        self._nc: Any = None  # the connection the subscriptions are on
        self.armed_at = 0.0  # time.monotonic() when last armed
        self.disconnects_at_arm = 0  # the connection's count of lost connections then
        self._heeded = False  # the ring since the last arm was taken (heed)

    @property
    def armed(self) -> bool:
        return bool(self._subs) and not self.rang.is_set()

    async def arm(self, nc: Any, timeout: float = 4.0) -> bool:
        """Subscribe for one message unless already armed and not rung since. True when armed
        just now: a message stored before the server held the interest rang nothing, so the
        caller looks at the stream again before waiting."""
        if self.armed:
            return False
        await self.disarm()
        self.rang.clear()
        self._heeded = False

        # A raw subscription (replicator.nats.client): the message's subject is never decoded.
        # nats-py's own decodes it strictly, and a subject that is not UTF-8 ended its read
        # loop, the connection deaf until its pings ran out.
        def ring(_subject: bytes, _reply: bytes, _payload: bytes, _headers: bytes | None) -> None:
            self.rang.set()

        before = nc.last_error
        nc.refusals_reported_by_subscriber.update(self.subjects)  # as DoorbellRefused, below
        self._nc = nc
        try:
            for subject in self.subjects:
                sub = await nc.raw_subscribe(subject, ring)
                self._subs.append(sub)
                await sub.unsubscribe(limit=1)  # the server drops the interest after one message
            # The server holds the interest before the caller looks; it answers a refused
            # subscription before this flush's PONG.
            await nc.flush_in_order(timeout)
        except BaseException:
            await self.disarm()  # not armed: the next quiet plan tries again
            refused = _refusal(nc, before)
            if refused is not None:
                raise DoorbellRefused(refused) from None
            raise
        refused = _refusal(nc, before)
        if refused is not None:
            await self.disarm()
            raise DoorbellRefused(refused)
        self.armed_at = time.monotonic()
        self.disconnects_at_arm = nc.disconnects
        return True

    async def disarm(self) -> None:
        subs, self._subs = self._subs, []
        for sub in subs:
            with contextlib.suppress(Exception):  # already gone after its message, or closed
                await self._nc.raw_unsubscribe(sub)  # its handler too, else one kept per arm

    def wait(self, timeout: float) -> bool:
        """Whether it rang within `timeout` seconds (from another thread than the loop's)."""
        return self.rang.wait(timeout)

    @property
    def listening(self) -> bool:
        """Armed, or rung since and the ring not yet heeded."""
        return bool(self._subs) and not self._heeded

    def heed(self, timeout: float) -> bool:
        """Whether a ring not yet heeded came or comes within `timeout` seconds; True once per
        arm. A caller that waited on the bell only while it was armed would sleep through a ring
        that came while it was busy (asking the stream). Called from one thread, not the loop's."""
        if not self.listening or not self.rang.wait(timeout):
            return False
        self._heeded = True
        return True
