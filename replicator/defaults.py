"""Batch and sampling defaults that the config and the reader options share (a leaf: both
read it, neither reads the other to get them)."""

from __future__ import annotations

# Rows per micro-batch while backlogged. A sampled batch rewrites the state of every bucket it
# touches, so larger batches amortise that (measured in make bench).
DEFAULT_COPY_BATCH = 10_000
DEFAULT_SAMPLING_BATCH = 50_000
DEFAULT_FIRST_BATCH = 2_000
# Message bytes per copy batch while backlogged: its rows pass through the driver (768 MB of
# JVM heap by default) on their way to the target; rows per batch are capped by this divided by
# the stream's mean message size. (Sampled rows carry no payloads: no cap needed.)
DEFAULT_BATCH_BYTES = 64 * 1024 * 1024
# Senders are hashed into this many buckets of Spark state; fixed once a checkpoint exists.
DEFAULT_SAMPLING_BUCKETS = 32
# Buckets per shuffle partition of a sampled query, when the config does not say: one task
# holding the default 32 buckets cost less CPU per message than two, and a fleet on the same
# cores lagged less (docs/performance.md, 2026-12-07 eleventh session); a Spark cluster's cores
# want more (configuration.md).
BUCKETS_PER_PARTITION = 32


def default_sampling_partitions(buckets: int) -> int:
    return max(1, buckets // BUCKETS_PER_PARTITION)
