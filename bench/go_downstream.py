"""Ours upstream, the Go Choria replicator downstream: copy a stream A -> B with this replicator
(copies chained with Nats-Expected-Last-Sequence), then B -> C with the Go binary in its default
mode, and count what reaches C. Shows whether the headers ours stores break a Go hop after it.

    .venv/bin/python -m bench.go_downstream --go-binary PATH [--messages 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path

import nats
import yaml
from nats.js.api import StreamConfig

from harness.localnats import free_port, local_cluster
from harness.process import ReplicatorProcess
from harness.streams import count_messages


async def _fill(url: str, n: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(publish_async_max_pending=2000)
        await js.add_stream(StreamConfig(name="REG", subjects=["reg.>"], allow_direct=True))
        futs = [await js.publish_async(f"reg.{i % 50}", json.dumps({"sender": f"n{i % 100}", "i": i}).encode())
                for i in range(n)]  # fmt: skip
        await asyncio.gather(*futs)
    finally:
        await nc.close()


async def _create(url: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().add_stream(StreamConfig(name="REG", subjects=["reg.>"], allow_direct=True))
    finally:
        await nc.close()


def _wait(url: str, n: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline:
        got = asyncio.run(count_messages(url, "REG"))
        if got >= n:
            break
        time.sleep(0.5)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--go-binary", required=True, help="the Choria stream-replicator binary (v0.9)")
    ap.add_argument("--messages", type=int, default=5000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="go-downstream-"))
    with local_cluster(1, "a") as a, local_cluster(1, "b") as b, local_cluster(1, "c") as c:
        asyncio.run(_fill(a.url, args.messages))
        ours = work / "ours.yaml"
        ours.write_text(yaml.safe_dump({"name": "city", "state_store": str(work / "state"), "monitor_port": free_port(),
                                        "streams": [{"stream": "REG", "source_url": a.url, "target_url": b.url}]}))  # fmt: skip
        rep = ReplicatorProcess(ours, work / "ours.log").start()
        try:
            in_b = _wait(b.url, args.messages, 180)
        finally:
            rep.stop()
        asyncio.run(_create(c.url))
        go = work / "go.yaml"
        go.write_text(yaml.safe_dump({"name": "region", "state_store": str(work / "go-state"),
                                      "streams": [{"stream": "REG", "source_url": b.url, "target_url": c.url}]}))  # fmt: skip
        with (work / "go.log").open("w") as log:
            proc = subprocess.Popen(
                [args.go_binary, "replicate", "--config", str(go)], stdout=log, stderr=log
            )
            try:
                in_c = _wait(c.url, args.messages, 120)
            finally:
                proc.terminate()
                proc.wait(30)
    print(f"ours A->B: {in_b} of {args.messages}; Go B->C: {in_c} of {args.messages} (logs in {work})")


if __name__ == "__main__":
    main()
