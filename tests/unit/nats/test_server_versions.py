"""Which source servers get the warning about a read across a stream leader change: only an
entry with a filter subject can take a message a new leader lacks for gone."""

from __future__ import annotations

import pytest
from nats.aio.client import Client

from replicator.nats.jetstream import leader_change_warning, server_version, takes_fast_batches


@pytest.mark.parametrize("version", [(2, 10), (2, 9), (1, 99)])
def test_a_clustered_source_on_servers_before_2_11_is_warned_about_with_the_fix(
    version: tuple[int, int],
) -> None:
    warning = leader_change_warning(version, replicas=3, filtered=True)
    assert warning is not None
    assert f"nats-server {version[0]}.{version[1]}" in warning
    assert "upgrade the source servers to 2.11 or later" in warning


@pytest.mark.parametrize(
    ("version", "replicas", "filtered"),
    [((2, 11), 3, True), ((2, 15), 3, True), ((3, 0), 5, True), ((2, 10), 1, True), (None, 3, True),
     ((2, 10), 3, False)],
    ids=["2.11-r3", "2.15-r3", "3.0-r5", "2.10-r1", "unknown-r3", "2.10-r3-unfiltered"],
)  # fmt: skip
def test_no_warning_where_a_new_leader_cannot_answer_before_applying_its_log(
    version: tuple[int, int] | None, replicas: int, filtered: bool
) -> None:
    # A single replica has no leader change; a server without a version in its INFO is not
    # nats-server, and nothing can be said of it. Without a filter, a message a new leader
    # lacks is read again unless a reply shows it gone (tests/integration/nats/test_readers.py).
    assert leader_change_warning(version, replicas, filtered) is None


def test_a_server_that_names_no_version_is_unknown_not_version_0_0() -> None:
    # nats-py says 0.0.0-unknown for a connection whose server gave no version (here: none yet).
    nc = Client()
    assert server_version(nc) is None
    assert leader_change_warning(server_version(nc), replicas=3, filtered=True) is None
    assert not takes_fast_batches(nc)
