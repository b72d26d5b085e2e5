"""Where a stream entry keeps its files: what candidates of one election share, and what not."""

from __future__ import annotations

from pathlib import Path

from replicator.config import parse_config
from replicator.entry_files import checkpoint_location, stopping_path


def _entry(tmp_path: Path, candidate: str, **over: object):  # type: ignore[no-untyped-def]
    entry = {
        "stream": "REG", "source_url": "nats://a:4222", "target_url": "nats://b:4222",
        "leader_election_name": candidate, **over,
    }  # fmt: skip
    cfg = parse_config({"name": "dc1", "state_store": str(tmp_path), "streams": [entry]})
    return cfg, cfg.streams[0]


def test_a_sampled_entry_s_candidates_share_its_checkpoint_but_each_stops_its_own_query(
    tmp_path: Path,
) -> None:
    sampled = {"inspect_field": "sender", "inspect_duration": "1h", "warn_duration": "30m"}
    a, b = _entry(tmp_path, "host-a", **sampled), _entry(tmp_path, "host/b", **sampled)
    assert checkpoint_location(*a) == checkpoint_location(*b)  # the sampling state goes with the lead
    assert stopping_path(*a) != stopping_path(*b)
    assert stopping_path(*a).parent == stopping_path(*b).parent
    assert stopping_path(*b).name == "stopping.host_b"


def test_a_copy_entry_s_candidates_keep_everything_apart(tmp_path: Path) -> None:
    a, b = _entry(tmp_path, "host-a"), _entry(tmp_path, "host-b")
    assert checkpoint_location(*a) != checkpoint_location(*b)
    assert stopping_path(*a).parent != stopping_path(*b).parent
