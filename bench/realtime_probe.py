"""Whether Spark's real-time mode (`trigger(realTime=...)`) can run our NATS source, asked of the
installed pyspark rather than of its documentation: the source is started under that trigger
with each sink the mode allows that could publish (a foreach writer) or show rows (console),
and what Spark answers is printed. Re-run it after upgrading pyspark.

    .venv/bin/python -m bench.realtime_probe
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from typing import Any

import nats
from nats.js.api import StreamConfig

from harness.localnats import local_cluster
from replicator.spark.session import build_session


async def _stream_with_messages(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="PROBE", subjects=["probe.>"], allow_direct=True))
        for i in range(10):
            await js.publish(f"probe.{i}", b"{}")
    finally:
        await nc.close()


class _RowCounter:
    """A foreach writer (the mode's one sink that runs our code per row)."""

    def open(self, partition_id: int, epoch_id: int) -> bool:
        return True

    def process(self, row: Any) -> None:
        pass

    def close(self, error: BaseException | None) -> None:
        pass


def main() -> None:
    with local_cluster(1, "rtprobe") as s:
        asyncio.run(_stream_with_messages(s.url))
        spark = build_session()
        try:
            df = (
                spark.readStream.format("nats-jetstream")
                .option("url", s.url)
                .option("stream", "PROBE")
                .load()
            )
            sinks: dict[str, Callable[[Any], Any]] = {
                "foreach writer": lambda w: w.foreach(_RowCounter()),
                "console": lambda w: w.format("console"),
            }
            for name, sink in sinks.items():
                # Append is refused by the mode itself; update is what it accepts.
                writer = sink(df.writeStream.outputMode("update")).trigger(realTime="5 seconds")
                try:
                    q = writer.option("checkpointLocation", tempfile.mkdtemp(prefix="rtprobe-")).start()
                    q.awaitTermination(15)
                    error = q.exception()
                    answer = "runs" if q.isActive else f"stopped: {error}"
                    q.stop()
                except Exception as e:
                    answer = f"refused: {e}"
                print(f"real-time mode, nats-jetstream -> {name}: {answer.splitlines()[0]}")
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
