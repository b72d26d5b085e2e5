"""A JetStream stream's backup and restore through the server's own API, as `nats stream backup`
and `nats stream restore` do it: `$JS.API.STREAM.SNAPSHOT.<stream>` streams the stream's store
to an inbox in chunks, each acknowledged for flow control; `$JS.API.STREAM.RESTORE.<stream>`
takes the chunks back, then an empty message, and answers with the restored stream's info."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import nats

API_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class StreamBackup:
    """What a snapshot gave: the stream's config and state then, and its store's bytes in chunks."""

    config: dict[str, Any]
    state: dict[str, Any]
    chunks: list[bytes]


def _answer(data: bytes, what: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(data)
    if "error" in body:
        raise RuntimeError(f"{what}: {body['error']}")
    return body


async def backup_stream(url: str, stream: str) -> StreamBackup:
    nc = await nats.connect(url.split(","))
    try:
        inbox = nc.new_inbox()
        chunks: list[bytes] = []
        ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_chunk(msg: Any) -> None:
            if msg.data:
                chunks.append(msg.data)
                if msg.reply:  # the last, short chunk has no reply subject
                    await nc.publish(msg.reply, b"")
            elif not ended.done():  # the end: no data, a status header (204 when complete)
                ended.set_result((msg.headers or {}).get("Status", ""))

        sub = await nc.subscribe(inbox, cb=on_chunk)
        try:
            reply = await nc.request(
                f"$JS.API.STREAM.SNAPSHOT.{stream}",
                json.dumps({"deliver_subject": inbox, "no_consumers": True}).encode(),
                timeout=API_TIMEOUT_S,
            )
            body = _answer(reply.data, f"snapshot of {stream}")
            status = await asyncio.wait_for(ended, API_TIMEOUT_S)
        finally:
            await sub.unsubscribe()
        if status not in ("", "204"):
            raise RuntimeError(f"snapshot of {stream} ended with status {status}")
        return StreamBackup(body["config"], body["state"], chunks)
    finally:
        await nc.close()


async def restore_stream(url: str, backup: StreamBackup) -> dict[str, Any]:
    """The stream as `backup` holds it; a stream of its name must not exist. Returns its info."""
    name = backup.config["name"]
    nc = await nats.connect(url.split(","))
    try:
        reply = await nc.request(
            f"$JS.API.STREAM.RESTORE.{name}",
            json.dumps({"config": backup.config, "state": backup.state}).encode(),
            timeout=API_TIMEOUT_S,
        )
        deliver = _answer(reply.data, f"restore of {name}")["deliver_subject"]
        for chunk in backup.chunks:
            ack = await nc.request(deliver, chunk, timeout=API_TIMEOUT_S)
            if ack.data:
                _answer(ack.data, f"restore of {name}")
        done = await nc.request(deliver, b"", timeout=API_TIMEOUT_S)
        return _answer(done.data, f"restore of {name}")
    finally:
        await nc.close()
