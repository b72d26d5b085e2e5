"""The Spark session a config's streams need, worked out before anything starts, and the check
that a JVM launched early serves only the session it was launched for."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from replicator.config import parse_config
from replicator.options import ReaderOptions
from replicator.spark.early_jvm import EarlyJvm
from replicator.spark.session_args import (
    SessionArgs,
    copies_live,
    reads_through_spark,
    resolve_master,
    session_args,
)

COMMON = {"source_url": "nats://127.0.0.1:4222", "target_url": "nats://127.0.0.1:4223"}
SAMPLED = {"inspect_field": "sender", "inspect_duration": "1h"}


def args_for(*streams: dict[str, Any], spark_master: str | None = None, **top: Any) -> SessionArgs:
    cfg = parse_config({"name": "dc1", "streams": [{**COMMON, **s} for s in streams], **top})
    return session_args(cfg, list(cfg.streams), resolve_master(cfg, spark_master))


def test_a_copy_only_embedded_run_reads_every_batch_in_the_driver_with_a_light_jvm() -> None:
    a = args_for({"stream": "A"}, {"stream": "B"})
    assert a == SessionArgs(
        master="local[*]",
        app_name="stream-replicator-dc1",
        conf={},
        light_jvm=True,
        driver_reads_all=True,
        quiet=True,
        raw_local_checkpoints=True,
    )


def test_one_sampled_stream_keeps_the_jvm_defaults_and_spark_reads_its_batches() -> None:
    a = args_for({"stream": "A"}, {"stream": "B", **SAMPLED})
    assert (a.light_jvm, a.driver_reads_all, a.raw_local_checkpoints) == (False, False, False)


def test_batches_larger_than_the_driver_reads_go_through_spark() -> None:
    big = ReaderOptions.min_partition_messages * 5
    cfg = parse_config(
        {
            "name": "dc1",
            "streams": [{**COMMON, "stream": "A", "driver_reads": "small", "batch_max_messages": big}],
        }
    )
    assert reads_through_spark(cfg.streams[0], "local[*]")
    assert not args_for({"stream": "A", "driver_reads": "small", "batch_max_messages": big}).driver_reads_all
    # On a cluster the default (auto) is "small": Spark's tasks read in parallel elsewhere.
    on_cluster = args_for({"stream": "A", "batch_max_messages": big}, spark_master="spark://h:7077")
    assert on_cluster.master == "spark://h:7077" and not on_cluster.driver_reads_all


@pytest.mark.parametrize(
    ("copy_live", "master", "live"),
    [
        (None, "local[*]", True),  # unset: embedded, the driver copies live
        (None, "spark://h:7077", False),  # unset, on a cluster: the executors read
        (True, "spark://h:7077", True),
        (False, "local[*]", False),
    ],
)
def test_copies_live_while_embedded_unless_told(copy_live: bool | None, master: str, live: bool) -> None:
    entry = {**COMMON, "stream": "A", **({} if copy_live is None else {"copy_live": copy_live})}
    assert copies_live(parse_config({"name": "dc1", "streams": [entry]}).streams[0], master) is live


def test_spark_master_in_spark_conf_wins_over_the_command_line() -> None:
    a = args_for({"stream": "A"}, spark_master="spark://cli:7077", spark_conf={"spark.master": "local[2]"})
    assert a.master == "local[2]"


def test_debug_logging_remote_checkpoints_and_profiling_change_what_they_should() -> None:
    assert not args_for({"stream": "A"}, loglevel="debug").quiet
    assert not args_for({"stream": "A"}, checkpoint_store="s3a://bucket/cp").raw_local_checkpoints
    assert args_for({"stream": "A"}, profiling=True).conf == {"spark.ui.enabled": "true"}


def test_a_jvm_launched_early_refuses_a_session_it_was_not_launched_for() -> None:
    launched = args_for({"stream": "A"})
    early = EarlyJvm(launched, {"spark.master": "local[*]"})
    other = dataclasses.replace(launched, light_jvm=False, conf={"spark.x": "1"})
    with pytest.raises(
        RuntimeError, match=r"launched for another session: conf \{\} != .*light_jvm True != False"
    ):
        early.wait(other)
