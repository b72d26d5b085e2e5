"""The Choria-format config: defaults, checks, one-line errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from replicator.config import ConfigError, load_config, parse_config
from replicator.election import election_key
from replicator.yaml_files import read_yaml

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


def test_leader_elected_entries_campaign_on_the_go_originals_key_and_never_share_one() -> None:
    entry = {**BASE["streams"][0], "leader_election_name": "host-a"}
    cfg = parse_config({**BASE, "streams": [{**entry, "name": "dc1"}, {**entry, "name": "dc2"}]})
    assert [s.leader_election_name for s in cfg.streams] == ["host-a", "host-a"]  # one candidate, two keys
    assert election_key("dc1", "REG") == "SR_dc1_REG"
    assert election_key("SR", "REG") == "SR_REG"  # the Go original's prefix test, kept
    # Two entries, but both would campaign on SR_dc1_a_REG.
    same_key = [{**entry, "stream": "REG", "name": "dc1_a"}, {**entry, "stream": "a_REG", "name": "dc1"}]
    with pytest.raises(ConfigError, match="same leader election key 'SR_dc1_a_REG'"):
        parse_config({**BASE, "streams": same_key})


def test_sampled_query_partitions_follow_the_buckets_unless_set() -> None:
    sampled = {**BASE["streams"][0], "inspect_field": "sender", "inspect_duration": "1h"}
    assert parse_config({**BASE, "streams": [sampled]}).streams[0].sampling_partitions == 1  # 32 buckets
    big = {**sampled, "sampling_buckets": 1024}
    assert parse_config({**BASE, "streams": [big]}).streams[0].sampling_partitions == 32
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


def test_checkpoints_go_under_state_store_unless_checkpoint_store_names_a_uri(tmp_path: Path) -> None:
    from replicator.entry_files import checkpoint_location

    cfg = parse_config({**BASE, "state_store": str(tmp_path)})
    assert checkpoint_location(cfg, cfg.streams[0]) == str(
        tmp_path / f"{cfg.streams[0].stream}_{cfg.streams[0].name}" / "checkpoint"
    )
    shared = parse_config({**BASE, "checkpoint_store": "s3a://bucket/ckpt/"})
    assert checkpoint_location(shared, shared.streams[0]) == (
        f"s3a://bucket/ckpt/{shared.streams[0].stream}_{shared.streams[0].name}/checkpoint"
    )
    with pytest.raises(
        ConfigError,
        match=r"checkpoint_store: '/data/ckpt' is not a URI: give one Spark can write to \(s3a://",
    ):
        parse_config({**BASE, "checkpoint_store": "/data/ckpt"})
    with pytest.raises(ConfigError, match=r"through Hadoop's s3a connector: write s3a://bucket/ckpt"):
        parse_config({**BASE, "checkpoint_store": "s3://bucket/ckpt"})


def test_order_is_the_streams_unless_subject_lanes_are_asked_for_where_they_apply() -> None:
    assert parse_config(BASE).streams[0].order == "stream"
    entry = parse_config(
        {**BASE, "streams": [{**BASE["streams"][0], "order": "subject", "lanes": 8}]}
    ).streams[0]
    assert (entry.order, entry.lanes) == ("subject", 8)
    with pytest.raises(ConfigError, match=r"order: Input should be 'stream' or 'subject'"):
        parse_config({**BASE, "streams": [{**BASE["streams"][0], "order": "sender"}]})
    sampled = {**BASE["streams"][0], "order": "subject", "inspect_field": "sender", "inspect_duration": "1h"}
    with pytest.raises(
        ConfigError,
        match=r"order: subject does not combine with sampling \(inspect_\*\) yet: use order: stream",
    ):
        parse_config({**BASE, "streams": [sampled]})


def test_chain_copies_is_on_unless_turned_off() -> None:
    assert parse_config(BASE).streams[0].chain_copies is True
    off = parse_config({**BASE, "streams": [{**BASE["streams"][0], "chain_copies": False}]})
    assert off.streams[0].chain_copies is False


# Every key of the Choria Stream Replicator v0.9's configuration, with a value it accepts.
V09_TOP_KEYS: dict[str, object] = {
    "tls": {"ca": ""},
    "choria": {"seed_file": "/etc/sr/choria.seed", "jwt_file": "/etc/sr/choria.jwt", "collective": "choria"},
    "monitor_port": 8080,
    "profiling": True,
    "logfile": "",
    "loglevel": "info",
    "heartbeats": {
        "interval": "10s", "url": "nats://127.0.0.1:4222", "leader_election": True, "headers": {"from": "dc1"},
        "subjects": [{"subject": "choria.node_metadata._monitor"},
                     {"subject": "example._monitor", "interval": "20s", "headers": {"noop": "true"}}],
    },
}  # fmt: skip
V09_STREAM_KEYS: dict[str, object] = {
    "name": "dc1", "filter_subject": "reg.>", "target_stream": "REG_COPY", "target_subject_prefix": "copy",
    "target_subject_remove": "reg.", "no_target_create": True, "ephemeral": True, "target_initiated": True,
    "start_sequence": 10, "tls": {"ca": ""}, "source_tls": {"ca": ""}, "target_tls": {"ca": ""},
    "choria": {"seed_file": "s"}, "source_choria": {"seed_file": "s"}, "target_choria": {"jwt_file": "j"},
    "max_age": "1h", "inspect_field": "sender", "inspect_force_field": "force", "inspect_duration": "1h",
    "warn_duration": "10m", "size_trigger": 1024, "leader_election_name": "host-a",
    "advisory": {"subject": "adv.%s.%v", "reliable": True},
}  # fmt: skip
V09_STREAM_ALTERNATIVES: dict[str, object] = {
    "start_time": "2024-01-02T15:04:05Z", "start_delta": "1h", "start_at_end": True,
    "inspect_header": "Sender", "inspect_subject_token": 2,
}  # fmt: skip


@pytest.mark.parametrize(
    ("where", "key"),
    [("top", k) for k in V09_TOP_KEYS]
    + [("stream", k) for k in V09_STREAM_KEYS]
    + [("stream", k) for k in V09_STREAM_ALTERNATIVES],
)
def test_every_v09_key_is_accepted_or_refused_with_why_never_as_a_misspelling(where: str, key: str) -> None:
    entry = dict(BASE["streams"][0])
    top = dict(BASE)
    if where == "top":
        top[key] = V09_TOP_KEYS[key]
    else:
        value = V09_STREAM_KEYS.get(key, V09_STREAM_ALTERNATIVES.get(key))
        entry[key] = value
        if key in (
            "inspect_field",
            "inspect_duration",
            "inspect_force_field",
            "warn_duration",
            "size_trigger",
            "advisory",
        ):
            entry.update(inspect_field="sender", inspect_duration="1h")
        if key in ("inspect_header", "inspect_subject_token"):
            entry["inspect_duration"] = "1h"
    top["streams"] = [entry]
    try:
        parse_config(top)
    except ConfigError as e:
        text = str(e)
        assert "spelling" not in text and "\n" not in text
        assert "not supported" in text, text  # a refusal says so, and why
        # Refused: Choria's credentials, and ephemeral: true (what it does here would double copies).
        assert key in ("choria", "ephemeral") or key.endswith("_choria"), f"{key} refused: {text}"


def test_tls_files_are_checked_as_the_config_is_read_and_carried_as_one_plain_type(tmp_path: Path) -> None:
    from replicator.nats.tls import TLSFiles

    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    stream = {**BASE["streams"][0], "target_tls": {"ca": str(ca)}}
    cfg = parse_config({**BASE, "tls": {"ca": str(ca)}, "streams": [stream]})
    s = cfg.streams[0]
    assert s.source_tls == s.target_tls == TLSFiles(ca=str(ca))  # inherited, and its own
    assert hash(s.source_tls) == hash(s.target_tls)  # keys a Spark worker's kept connections
    for tls, error in (
        ({"cert": str(ca)}, "streams[0].tls: cert and key must be given together"),
        (
            {"ca": str(tmp_path / "nope.pem")},
            f"streams[0].tls: ca file '{tmp_path / 'nope.pem'}' does not exist",
        ),
        ({"ca": str(ca), "kye": "k"}, "streams[0].tls.kye: unknown key: remove it or check its spelling"),
    ):
        with pytest.raises(ConfigError) as failed:
            parse_config({**BASE, "streams": [{**BASE["streams"][0], "tls": tls}]})
        assert str(failed.value).startswith(error), str(failed.value)


def _entry(**over: object) -> dict[str, object]:
    return {"stream": "S", "source_url": "nats://a:4222", "target_url": "nats://b:4222", **over}


def test_several_start_keys_take_chorias_order_with_a_note() -> None:
    """Choria's replicator runs a file with several start keys, taking the first of start_at_end,
    start_sequence, start_delta, start_time; so does ours, and says which it used."""
    cfg = parse_config(
        {
            "name": "dc1",
            "streams": [_entry(start_sequence=5, start_delta="1h", start_time="2024-01-02T15:04:05Z")],
        }
    )
    s = cfg.streams[0]
    assert (s.start_sequence, s.start_delta, s.start_time) == (5, None, None)
    (note,) = cfg.notices()
    assert note.startswith(
        "streams[0].start_sequence, start_time, start_delta are all set: start_sequence is used"
    )
    assert (
        parse_config({"name": "dc1", "streams": [_entry(start_at_end=True, start_sequence=5)]})
        .streams[0]
        .start_sequence
        == 0
    )


def test_ephemeral_true_is_refused_with_why() -> None:
    with pytest.raises(
        ConfigError, match=r"^streams\[0\]\.ephemeral: true is not supported: .*remove the key$"
    ):
        parse_config({"name": "dc1", "streams": [_entry(ephemeral=True)]})
    assert parse_config({"name": "dc1", "streams": [_entry(ephemeral=False)]}).notices() == []


def test_target_initiated_where_choria_refuses_it_is_accepted_with_a_note() -> None:
    cfg = parse_config({"name": "dc1", "streams": [_entry(target_initiated=True, max_age="1h")]})
    (note,) = cfg.notices()
    assert "without filter_subject and with max_age" in note and "Choria's replicator refuses" in note
    ok = parse_config({"name": "dc1", "streams": [_entry(target_initiated=True, filter_subject="s.>")]})
    assert ok.notices() == []


def test_a_file_with_only_heartbeats_is_valid_and_one_with_neither_is_not() -> None:
    cfg = parse_config(
        {"name": "dc1", "heartbeats": {"url": "nats://a:4222", "subjects": [{"subject": "x"}]}}
    )
    assert cfg.streams == []
    with pytest.raises(ConfigError, match=r"streams: give one or more stream entries \(or heartbeats:"):
        parse_config({"name": "dc1"})


@pytest.mark.parametrize(
    ("more", "refused"),
    [
        ({"inspect_field": "sender", "inspect_duration": "1h"}, r"sampling \(inspect_\*\)"),
        ({"order": "subject"}, "order: subject"),
        ({"leader_election_name": "sr"}, "leader_election_name"),
        ({"copy_ahead": False}, "copy_ahead: false"),
    ],
)
def test_copy_live_is_unset_by_default_and_refused_only_when_asked_for_where_it_cannot_apply(
    more: dict[str, object], refused: str
) -> None:
    assert parse_config(BASE).streams[0].copy_live is None  # on wherever it applies
    # Unset, an entry it cannot apply to is taken as it is (its query copies).
    assert parse_config({**BASE, "streams": [{**BASE["streams"][0], **more}]}).streams[0].copy_live is None
    assert parse_config({**BASE, "streams": [{**BASE["streams"][0], "copy_live": True}]}).streams[0].copy_live
    with pytest.raises(ConfigError, match=rf"copy_live does not combine with {refused}: remove copy_live"):
        parse_config({**BASE, "streams": [{**BASE["streams"][0], "copy_live": True, **more}]})


@pytest.mark.parametrize(
    ("over", "error"),
    [
        ({"stream": ""}, "streams[0].stream: give the name of the source stream"),
        ({"filter_subject": "foo bar"}, "streams[0].filter_subject: 'foo bar' holds whitespace"),
        ({"filter_subject": "a..b"}, "streams[0].filter_subject: 'a..b' has an empty token"),
        ({"filter_subject": "a.>.b"}, "streams[0].filter_subject: 'a.>.b' has > before its last token"),
        ({"target_subject_prefix": "A.*"}, "streams[0].target_subject_prefix: 'A.*' holds a wildcard"),
        ({"target_subject_prefix": "A."}, "streams[0].target_subject_prefix: 'A.' has an empty token"),
        ({"target_subject_remove": "a\tb"}, "streams[0].target_subject_remove: 'a\\tb' holds whitespace"),
        (
            {"inspect_field": "sender", "inspect_duration": "1h", "advisory": {"subject": "adv.>"}},
            "streams[0].advisory.subject: 'adv.>' holds a wildcard",
        ),
        (
            {"inspect_field": "sender", "inspect_duration": "99999999999h"},
            "streams[0].inspect_duration: invalid",
        ),
        ({"target_url": "nats://a:4222"}, "config: entry 'dc1' would copy stream 'S' into itself"),
        (
            {"start_sequence": True},
            "streams[0].start_sequence: expected an integer, got true: write a number",
        ),
        (
            {"start_sequence": "5"},
            'streams[0].start_sequence: expected an integer, got the string "5": write it without quotes',
        ),
        ({"lanes": 1.5}, "streams[0].lanes: expected an integer: write a whole number"),
        (
            {"start_sequence": 2**64},
            f"streams[0].start_sequence: {2**64} is out of range: write a number at most {2**64 - 1}",
        ),
        (
            {"batch_max_bytes": 5},
            "streams[0].batch_max_bytes: 5 is out of range: write a number at least 1048576",
        ),
        ({"size_trigger": -1}, "streams[0].size_trigger: -1 is out of range: write a number at least 0"),
        (
            {"size_trigger": " -1\n"},  # a float key takes a string: shown quoted, on one line
            'streams[0].size_trigger: " -1\\n" is out of range: write a number at least 0',
        ),
        (
            {"lanes": 10**30},
            "streams[0].lanes: 10000000000000000000... is out of range: write a number at most 1024",
        ),
        (
            {"inspect_field": "sender", "inspect_duration": "1h", "warn_duration": "0s"},
            "streams[0]: warn_duration must be more than 0",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key_and_what_to_give(over: dict[str, object], error: str) -> None:
    """Found by a review as a user would try them: each was accepted (an entry copying a stream
    into itself, subjects NATS would refuse or read otherwise) or crashed with a traceback (a
    duration too large for Python's timedelta)."""
    with pytest.raises(ConfigError) as failed:
        parse_config({"name": "dc1", "streams": [_entry(**over)]})
    message = str(failed.value)
    assert message.startswith(error) and "\n" not in message, message


def test_the_same_stream_in_the_same_cluster_is_a_copy_only_under_another_name_account_or_subjects(
    tmp_path: Path,
) -> None:
    cfg = parse_config(
        {"name": "dc1", "streams": [_entry(target_url="nats://a:4222", target_stream="S_COPY")]}
    )
    assert cfg.streams[0].target_stream == "S_COPY"
    # Certificates that map to two accounts (a cold review): the same URL, not the same stream.
    for name in ("ca", "a", "a_key", "b", "b_key"):
        (tmp_path / f"{name}.pem").write_text("-")
    tls_a = {
        "ca": str(tmp_path / "ca.pem"),
        "cert": str(tmp_path / "a.pem"),
        "key": str(tmp_path / "a_key.pem"),
    }
    tls_b = {
        "ca": str(tmp_path / "ca.pem"),
        "cert": str(tmp_path / "b.pem"),
        "key": str(tmp_path / "b_key.pem"),
    }
    accounts = _entry(target_url="nats://a:4222", source_tls=tls_a, target_tls=tls_b)
    assert parse_config({"name": "dc1", "streams": [accounts]}).streams[0].target_tls is not None
    # Copies under a prefix may lie outside what the entry reads.
    prefixed = _entry(target_url="nats://a:4222", filter_subject="S.raw.>", target_subject_prefix="sampled")
    assert parse_config({"name": "dc1", "streams": [prefixed]}).streams[0].target_subject_prefix == "sampled"
    cfg = parse_config(
        {"name": "dc1", "streams": [_entry(filter_subject="S.*.facts", target_subject_prefix="DC1")]}
    )
    assert cfg.streams[0].filter_subject == "S.*.facts"


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"name: sr\xff\n", "not UTF-8 text (byte 8): save the file as UTF-8"),
        (
            b"name: sr\nstate_store: 2024-02-30\n",
            "a value YAML cannot read (day is out of range for month): quote it",
        ),
        (b"name: sr\nmonitor_port: !!int abc\n", "a value YAML cannot read"),
    ],
)
def test_a_file_yaml_cannot_read_is_one_line(tmp_path: Path, content: bytes, error: str) -> None:
    path = tmp_path / "sr.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as failed:
        load_config(path)
    message = str(failed.value)
    assert message.startswith(f"{path}: {error}") and "\n" not in message, message


def test_a_key_given_twice_is_refused_not_the_last_one_kept(tmp_path: Path) -> None:
    """YAML keeps the last of two equal keys: a second `stream:` replaced the first, silently."""
    path = tmp_path / "sr.yaml"
    path.write_text("name: dc1\nstreams:\n  - stream: REG\n    stream: OTHER\n    source_url: nats://a\n"
                    "    target_url: nats://b\n")  # fmt: skip
    with pytest.raises(ConfigError) as failed:
        load_config(path)
    assert (
        str(failed.value)
        == f"{path}: line 4: not valid YAML: key 'stream' is given twice in one mapping: keep one"
    )
    path.write_text("base: &b {x: 1, y: 2}\nother: {<<: *b, y: 3}\n")  # a merge's keys may be overridden
    assert read_yaml(path, "config file")["other"] == {"x": 1, "y": 3}
    # ...also through a chain of merges, a shallower mapping merging a deeper one built by a
    # merge (the first version took the merged keys for keys given twice: a cold review)
    path.write_text("x: &t {ca: 1, cert: 2}\ny: &c\n  <<: *t\n  cert: 3\nh:\n  tls:\n    <<: *c\n")
    assert read_yaml(path, "config file")["h"] == {"tls": {"ca": 1, "cert": 3}}
    path.write_text("? [a, b]\n: 1\n")  # a key YAML cannot hash: one line, as before
    with pytest.raises(ValueError, match="line 1: not valid YAML: found unhashable key"):
        read_yaml(path, "config file")


@pytest.mark.parametrize("master", ["local", "local[*]", "local[2]", "local[4, 3]", "local[01]",
                                    "spark://h1:7077,h2:7077", "yarn", "k8s://https://k:6443"])  # fmt: skip
def test_spark_masters_spark_takes_are_taken(master: str) -> None:
    assert parse_config({**BASE, "spark_master": master, "spark_conf": {"spark.master": master}})


@pytest.mark.parametrize(
    "master",
    [
        "lcoal[*]",
        "local[0]",
        "local-cluster[2, 1, 1024]",
        "local[x]",
        "Local",
        "spark:/h:7077",
        "mesos://h:5050",
        "",
    ],
)
def test_a_spark_master_spark_would_refuse_is_one_line(master: str) -> None:
    """Found only once the JVM was launched before: a Java stack in the log, then a replicator
    exiting with Spark's `[JAVA_GATEWAY_EXITED]`, which names neither the key nor the fix."""
    with pytest.raises(ConfigError, match=r"^spark_master: .* is not a Spark master URL: use local\[\*\]"):
        parse_config({**BASE, "spark_master": master})
    with pytest.raises(ConfigError, match=r"^spark_conf: spark.master: .* is not a Spark master URL"):
        parse_config({**BASE, "spark_conf": {"spark.master": master}})


@pytest.mark.parametrize(
    ("master", "fix"),
    [
        ("local[99999999999]", r"threads: use local\[\*\] \(every core\) or fewer"),
        ("local[2, 2147483648]", "task failures: give a smaller second number"),
        ("local[*, 99999999999]", "task failures: give a smaller second number"),
    ],
)
def test_a_local_master_past_a_java_int_is_refused_in_one_line(master: str, fix: str) -> None:
    """Spark reads local[N,F]'s numbers as Java ints: past 2^31-1 it refused them as it started.
    The line names the number that is too large."""
    assert parse_config({**BASE, "spark_master": "local[2147483647, 2147483647]"})
    assert parse_config({**BASE, "spark_master": "local[*, 2147483647]"})
    with pytest.raises(ConfigError, match=rf"^spark_master: .*: Spark takes at most 2147483647 {fix}$"):
        parse_config({**BASE, "spark_master": master})


@pytest.mark.parametrize(
    ("shared", "own", "error"),
    [
        ({"a b": "x"}, {}, "heartbeats.headers: 'a b' is not a header name"),
        ({"X:Y": "x"}, {}, "heartbeats.headers: 'X:Y' is not a header name"),
        ({"Größe": "x"}, {}, "heartbeats.headers: 'Größe' is not a header name"),
        ({}, {"X(1)": "v"}, "heartbeats.subjects[0].headers: 'X(1)' is not a header name"),
    ],
)
def test_heartbeat_header_names_nats_would_refuse_are_refused(
    shared: dict[str, str], own: dict[str, str], error: str
) -> None:
    """Accepted before, then refused by nats-py at every heartbeat (logged as failed, nothing
    published). Names it trims, and values with line breaks (it sends them as spaces), are kept."""
    hb = {"url": "nats://a:4222", "headers": shared, "subjects": [{"subject": "x", "headers": own}]}
    with pytest.raises(ConfigError) as e:
        parse_config({"name": "dc1", "heartbeats": hb})
    assert str(e.value).startswith(error) and "\n" not in str(e.value)
    fine = {"X-Origin": "dc 1: a", " choria.dc ": "primary site\n", "x_origin": "a\r\nb"}
    assert parse_config(
        {"name": "dc1", "heartbeats": {**hb, "headers": fine, "subjects": [{"subject": "x"}]}}
    )


def test_true_is_not_taken_for_a_number() -> None:
    with pytest.raises(ConfigError, match="monitor_port: expected an integer, got true"):
        parse_config({**BASE, "monitor_port": True})


def test_state_store_defaults_to_state_beside_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configuration.md: `./state` beside the config file, wherever the process was started."""
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    (conf_dir / "sr.yaml").write_text(
        "name: dc1\nstreams: [{stream: S, source_url: 'nats://a', target_url: 'nats://b'}]\n"
    )
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_config("../etc/sr.yaml").state_store == str(conf_dir / "state")
    assert load_config(conf_dir / "sr.yaml").state_store == str(conf_dir / "state")


def test_heartbeat_intervals_under_1s_and_batch_max_bytes_outside_1_mib_to_1_gib_are_refused() -> None:
    """configuration.md: heartbeats' interval "at least 1s" (shared, or a subject's own), and
    `batch_max_bytes` "Between 1 MiB and 1 GiB"; each refusal one line."""
    hb = {"url": "nats://a:4222", "subjects": [{"subject": "x"}]}
    for interval, own in (("1s", None), ("900ms", None), ("10s", "500ms")):
        subject = {"subject": "x", **({"interval": own} if own else {})}
        cfg = {"name": "dc1", "heartbeats": {**hb, "interval": interval, "subjects": [subject]}}
        if interval == "1s":
            assert parse_config(cfg).heartbeats is not None
            continue
        with pytest.raises(ConfigError, match="heartbeat intervals must be at least 1s") as e:
            parse_config(cfg)
        assert "\n" not in str(e.value)
    entry = BASE["streams"][0]
    for size, taken in ((1 << 20, True), ((1 << 20) - 1, False), (1 << 30, True), ((1 << 30) + 1, False)):
        cfg = {**BASE, "streams": [{**entry, "batch_max_bytes": size}]}
        if taken:
            assert parse_config(cfg).streams[0].batch_max_bytes == size
            continue
        with pytest.raises(ConfigError, match=r"^streams\[0\]\.batch_max_bytes: ") as e:
            parse_config(cfg)
        assert "\n" not in str(e.value), str(e.value)


def test_a_float_key_s_bound_is_written_as_the_user_would_write_it() -> None:
    with pytest.raises(ConfigError) as failed:
        parse_config({"name": "dc1", "streams": [_entry(size_trigger=-1)]})
    assert str(failed.value) == "streams[0].size_trigger: -1 is out of range: write a number at least 0"
