"""The reader options: one typed object, defaults in one place, Spark's strings both ways."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from replicator.config import parse_config
from replicator.defaults import DEFAULT_COPY_BATCH, DEFAULT_SAMPLING_BATCH, DEFAULT_SAMPLING_BUCKETS
from replicator.nats.tls import TLSFiles
from replicator.options import ReaderOptions, SamplingOptions


def test_every_field_survives_sparks_string_options() -> None:
    o = ReaderOptions(
        url="nats://a:4222,b",
        stream="S",
        filter_subject="x.>",
        start_time=datetime(2024, 1, 2, 15, 4, 5, tzinfo=UTC),
        min_start_sequence=17,
        max_messages_per_batch=123,
        first_batch_messages=7,
        parallelism=3,
        chunk_messages=99,
        chunk_bytes=4096,
        tls=TLSFiles("/ca", "/cert", "/key"),
        sampling=SamplingOptions(inspect_header="X-Node", inspect_force_field="f", sampling_buckets=64),
    )
    strings = o.to_spark()
    assert all(isinstance(v, str) for v in strings.values())
    assert ReaderOptions.from_spark(strings) == o


def test_defaults_are_left_out_and_come_back() -> None:
    o = ReaderOptions(url="nats://a", stream="S")
    assert o.to_spark() == {"url": "nats://a", "stream": "S"}
    assert ReaderOptions.from_spark({"url": "nats://a", "stream": "S"}) == o
    assert o.max_messages_per_batch == DEFAULT_COPY_BATCH and o.sampling is None


def test_the_config_and_the_source_share_their_defaults() -> None:
    base = {"stream": "S", "source_url": "nats://a", "target_url": "nats://b"}
    copy, sampled = parse_config(
        {
            "name": "dc1",
            "streams": [base, {**base, "name": "s", "inspect_field": "sender", "inspect_duration": "1h"}],
        }
    ).streams
    assert copy.batch_max_messages == DEFAULT_COPY_BATCH
    assert sampled.batch_max_messages == DEFAULT_SAMPLING_BATCH
    assert (
        sampled.sampling_buckets
        == SamplingOptions(inspect_field="x").sampling_buckets
        == DEFAULT_SAMPLING_BUCKETS
    )


def test_options_the_user_sets_directly_are_checked_with_one_line_each() -> None:
    with pytest.raises(ValueError, match="option 'stream' is required"):
        ReaderOptions.from_spark({"url": "nats://a"})
    with pytest.raises(ValueError, match="unknown option 'max_mesages_per_batch'; known options: "):
        ReaderOptions.from_spark({"url": "nats://a", "stream": "S", "max_mesages_per_batch": "5"})
    with pytest.raises(ValueError, match="option parallelism='two' is not a valid int"):
        ReaderOptions.from_spark({"url": "nats://a", "stream": "S", "parallelism": "two"})
    with pytest.raises(ValueError, match="max_messages_per_batch must be at least 1"):
        ReaderOptions.from_spark({"url": "nats://a", "stream": "S", "max_messages_per_batch": "0"})
    with pytest.raises(ValueError, match="sampling needs inspect_field"):
        ReaderOptions.from_spark({"url": "nats://a", "stream": "S", "sampling": "true"})
    with pytest.raises(ValueError, match="start_time needs a time zone"):
        ReaderOptions(url="nats://a", stream="S", start_time=datetime(2024, 1, 1))


def test_sparks_option_names_are_case_insensitive() -> None:
    assert ReaderOptions.from_spark({"URL": "nats://a", "Stream": "S"}).stream == "S"


def test_a_stream_entry_becomes_the_options_its_query_reads_with() -> None:
    entry = {
        "stream": "REG",
        "source_url": "nats://a",
        "target_url": "nats://b",
        "filter_subject": "reg.>",
        "start_sequence": 5,
        "inspect_subject_token": 2,
        "inspect_duration": "1h",
        "sampling_buckets": 64,
    }
    s = parse_config({"name": "dc1", "streams": [entry]}).streams[0]
    o = ReaderOptions.from_config(s, min_start_sequence=100)
    assert (o.stream, o.filter_subject, o.start_sequence, o.min_start_sequence) == ("REG", "reg.>", 5, 100)
    assert o.max_messages_per_batch == o.first_batch_messages == DEFAULT_SAMPLING_BATCH
    assert o.sampling == SamplingOptions(inspect_subject_token=2, sampling_buckets=64)
    assert ReaderOptions.from_spark(o.to_spark()) == o


def test_target_initiated_reads_four_times_as_much_per_request_for_a_long_source_link() -> None:
    entry = {"stream": "REG", "source_url": "nats://a", "target_url": "nats://b"}
    near = ReaderOptions.from_config(parse_config({"name": "dc1", "streams": [entry]}).streams[0])
    far = ReaderOptions.from_config(
        parse_config({"name": "dc1", "streams": [{**entry, "target_initiated": True}]}).streams[0]
    )
    assert (far.chunk_messages, far.chunk_bytes) == (4 * near.chunk_messages, 4 * near.chunk_bytes)
    assert ReaderOptions.from_spark(far.to_spark()) == far


def test_a_hot_standbys_lease_file_travels_with_the_options() -> None:
    o = ReaderOptions(url="nats://a", stream="REG", lease_file="/var/lib/sr/REG_dc1/leading.json")
    assert ReaderOptions.from_spark(o.to_spark()).lease_file == o.lease_file
