"""Fixtures of the integration tests that drive the replicator's pieces directly (no process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from replicator.aio import LoopThread


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    """The event loop thread the sinks publish on, as a replication's."""
    lt = LoopThread()
    yield lt
    lt.stop()
