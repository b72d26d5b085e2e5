"""The Choria-format config: defaults, checks, one-line errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from replicator.config import ConfigError, parse_config

BASE = {"name": "dc1", "streams": [{"stream": "S", "source_url": "nats://a", "target_url": "nats://b"}]}


def test_config_defaults_follow_choria() -> None:
    cfg = parse_config(BASE)
    s = cfg.streams[0]
    assert (s.name, s.target_stream) == ("dc1", "S")
    cfg = parse_config(
        {**BASE, "streams": [{**BASE["streams"][0], "inspect_field": "sender", "inspect_duration": "1h"}]}
    )
    assert cfg.streams[0].warn_duration == timedelta(minutes=30)


def test_config_start_time_and_duplicates() -> None:
    s = {**BASE["streams"][0], "start_time": "2024-01-02T15:04:05Z"}
    assert parse_config({**BASE, "streams": [s]}).streams[0].start_time == datetime(
        2024, 1, 2, 15, 4, 5, tzinfo=UTC
    )
    with pytest.raises(ConfigError, match="duplicate stream configuration name"):
        parse_config({**BASE, "streams": [BASE["streams"][0], BASE["streams"][0]]})
    with pytest.raises(ConfigError, match="only one inspection mode"):
        parse_config(
            {
                **BASE,
                "streams": [
                    {
                        **BASE["streams"][0],
                        "inspect_field": "a",
                        "inspect_header": "b",
                        "inspect_duration": "1h",
                    }
                ],
            }
        )
    with pytest.raises(ConfigError, match="warn_duration must be shorter"):
        parse_config(
            {
                **BASE,
                "streams": [
                    {
                        **BASE["streams"][0],
                        "inspect_field": "a",
                        "inspect_duration": "1h",
                        "warn_duration": "2h",
                    }
                ],
            }
        )
    with pytest.raises(ConfigError, match="leader_election_name is not supported"):
        parse_config({**BASE, "streams": [{**BASE["streams"][0], "leader_election_name": "x"}]})


def test_sampled_query_partitions_follow_the_buckets_unless_set() -> None:
    sampled = {**BASE["streams"][0], "inspect_field": "sender", "inspect_duration": "1h"}
    assert parse_config({**BASE, "streams": [sampled]}).streams[0].sampling_partitions == 2  # 32 buckets
    big = {**sampled, "sampling_buckets": 1024}
    assert parse_config({**BASE, "streams": [big]}).streams[0].sampling_partitions == 64
    assert (
        parse_config({**BASE, "streams": [{**big, "sampling_partitions": 8}]}).streams[0].sampling_partitions
        == 8
    )
    with pytest.raises(ConfigError, match=r"sampling_partitions \(64\) must not exceed sampling_buckets"):
        parse_config({**BASE, "streams": [{**sampled, "sampling_partitions": 64}]})


def test_the_monitor_listens_on_every_interface_unless_given_an_address() -> None:
    assert parse_config(BASE).monitor_address == "0.0.0.0"
    assert parse_config({**BASE, "monitor_address": "127.0.0.1"}).monitor_address == "127.0.0.1"
    assert parse_config({**BASE, "monitor_address": "::1"}).monitor_address == "::1"
    with pytest.raises(
        ConfigError, match=r"monitor_address: 'localhost:9100' is not an IP address: use 127\.0\.0\.1"
    ):
        parse_config({**BASE, "monitor_address": "localhost:9100"})


def test_chain_copies_is_on_unless_turned_off() -> None:
    assert parse_config(BASE).streams[0].chain_copies is True
    off = parse_config({**BASE, "streams": [{**BASE["streams"][0], "chain_copies": False}]})
    assert off.streams[0].chain_copies is False
