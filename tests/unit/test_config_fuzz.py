"""Any YAML a user could write gives a valid config or one ConfigError line: never a
traceback, never a message spread over lines."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replicator.config import Config, ConfigError, load_config

KEYS = [
    "name", "streams", "stream", "source_url", "target_url", "target_stream", "tls", "ca", "cert", "key",
    "inspect_field", "inspect_duration", "warn_duration", "size_trigger", "advisory", "subject", "reliable",
    "start_sequence", "start_time", "start_delta", "max_age", "monitor_port", "monitor_address", "state_store",
    "loglevel", "log_format", "batch_max_messages", "sampling_buckets", "chain_copies", "spark_conf",
    "leader_election_name", "filter_subject", "target_subject_prefix", "heartbeats", "nonsense",
]  # fmt: skip
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.sampled_from(["nats://127.0.0.1:4222", "1h", "-5s", "10x", "", " ", "S", "a b", "tls://h:0", "%v"]),
    st.text(max_size=12),
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=5),
    ),
    max_leaves=20,
)
DOCUMENTS = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8),
    st.fixed_dictionaries(
        {
            "name": SCALARS,
            "streams": st.lists(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8), max_size=3),
        }
    ),
    VALUES,
)


def _load(text: str) -> Config | str:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "sr.yaml"
        path.write_text(text)
        try:
            return load_config(path)
        except ConfigError as e:
            return str(e)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS)
@example({"streams": [], "name": "n", "tls": {"\n": None}})  # an unknown key holding a newline
def test_any_yaml_document_is_a_config_or_one_error_line(doc: Any) -> None:
    out = _load(yaml.safe_dump(doc, allow_unicode=True))
    if isinstance(out, str):
        assert out and "\n" not in out and "Traceback" not in out


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_config_or_one_error_line(text: str) -> None:
    out = _load(text)
    if isinstance(out, str):
        assert out and "\n" not in out
