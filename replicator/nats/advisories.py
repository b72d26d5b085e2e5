"""Publishing a batch's advisories to the source cluster: core NATS messages, or (reliable)
JetStream publishes acknowledged by whichever stream holds the advisory subject, each carrying
its event id as Nats-Msg-Id so that a batch published again stores nothing twice."""

from __future__ import annotations

import asyncio
import contextlib

import nats.errors

from replicator.headers import MSG_ID_HEADER
from replicator.nats.client import ReplicatorClient
from replicator.nats.publisher import ANY_STREAM, PipelinedPublisher, PublishError
from replicator.nats.wire import HEADER_VALUE_SAFE, WireError


def msg_id_header(event_id: str) -> bytes:
    """The header line of an advisory's id: a KSUID (base62) as the rules make it, checked
    rather than escaped (one regex match per advisory, not the general header encoder)."""
    if not HEADER_VALUE_SAFE.fullmatch(event_id):
        raise WireError(f"advisory event id {event_id!r} cannot be a header value")
    return b"%s: %s\r\n" % (_MSG_ID_NAME, event_id.encode())


_MSG_ID_NAME = MSG_ID_HEADER.encode()

# Rounds of publishing what is not stored yet, before the batch fails.
ROUNDS = 10


async def publish_advisories(
    nc: ReplicatorClient,
    advisories: list[tuple[str, bytes, str]],
    reliable: bool,
) -> None:
    """Publish (subject, payload, event id) in order, the id as Nats-Msg-Id. Reliable: every one is stored, or
    PublishError (the batch fails and is replayed: the ids make what was stored a no-op)."""
    if not reliable:
        for subject, data, _ in advisories:
            await nc.publish(subject, data)
        await nc.flush(timeout=30)
        return
    # Pipelined on the connection's raw path, as copies are (nats-py's publish_async took a
    # quarter of the driver's time when every message was a new sender's). What a round did not
    # get stored goes again, in order, in the next: all of it when the round itself failed (its
    # ids make a second copy of what was stored a no-op, inside the stream's duplicate window).
    pending = [(s, d, msg_id_header(i)) for s, d, i in advisories]
    for attempt in range(ROUNDS):
        publisher = PipelinedPublisher(nc, ANY_STREAM)
        try:
            outcome = await publisher.publish(pending, timeout=30 + len(pending) / 1000)
            refused = {r.index: r.reason for r in outcome.failures}
        except (PublishError, nats.errors.Error, ConnectionError, OSError) as e:
            refused = dict.fromkeys(range(len(pending)), repr(e))
        finally:
            with contextlib.suppress(Exception):
                await publisher.close()
        if not refused:
            return
        first = min(refused)
        why = f"advisory on {pending[first][0]} not stored: {refused[first]}"
        pending = [m for i, m in enumerate(pending) if i in refused]
        if attempt < ROUNDS - 1:
            await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
    raise PublishError(f"{why}; is there a stream for the advisory subject on the source cluster?")
