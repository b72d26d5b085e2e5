"""/metrics as the Go original exports it: Choria's counters under their exact names and types,
no `_created` series, per-message processing time; our own metrics beside them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from replicator.metrics import GO_COUNTERS, LIMITER, MetricLabels, Metrics, exposition

NS = "choria_stream_replicator_replicator"


def exported(registry: CollectorRegistry) -> tuple[str, dict[str, str]]:
    text = exposition(registry).decode()
    types = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}
    return text, types


def test_go_counters_are_exported_under_their_go_names_and_types() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry)
    labels = MetricLabels("REG", "dc1", "reg")
    m.start_series(labels, sampled=True, events=("new", "expire"))
    labels.of(m.copied_msgs).inc(3)
    m.heartbeat_published.labels("dc1", "reg._monitor").inc()
    m.election_campaigns.labels("SR_dc1_REG", "host-a", "leader", "dc1").inc()
    text, types = exported(registry)

    for name in GO_COUNTERS:
        assert types.get(name) == "counter", f"{name} is not exported as a counter named so"
        assert f"# TYPE {name}_total" not in text
    assert f'{NS}_copied_messages{{replicator="dc1",stream="REG",worker="reg"}} 3.0' in text
    assert (
        'choria_stream_replicator_advisor_total_messages{advisory="expire",replicator="dc1",stream="REG"} 0.0'
        in text
    )
    assert f'choria_stream_replicator_limiter_messages_copy_forced_count{{limiter="{LIMITER}"' in text
    assert types["choria_stream_replicator_tracker_total_items"] == "gauge"
    for state in ("healthy", "warning"):  # the fleet at a glance, at zero from the start
        assert (
            f'choria_stream_replicator_tracker_senders{{replicator="dc1",state="{state}",stream="REG",worker="reg"}} 0.0'
            in text
        )
    assert types["choria_stream_replicator_tracker_expired_total"] == "counter"
    assert types["choria_stream_replicator_heartbeat_publish_time"] == "summary"
    assert types[f"{NS}_processing_time_seconds"] == "summary"
    assert "_created" not in text  # one series per counter


def test_our_own_counters_keep_the_python_clients_total_suffix() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry)
    m.start_series(MetricLabels("REG", "dc1", "reg"))
    _, types = exported(registry)
    assert types[f"{NS}_duplicate_messages_total"] == "counter"
    assert types[f"{NS}_driver_read_batches_total"] == "counter"


def test_processing_time_is_per_message_as_in_go() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry)
    labels = MetricLabels("REG", "dc1", "reg")
    m.start_series(labels)
    m.processing_time.observe(labels.values(), 1000, 2.0)
    m.processing_time.observe(labels.values(), 3000, 4.0)
    text, _ = exported(registry)
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == f"{NS}_processing_time_seconds"]
    values = {s.name: s.value for s in family.samples}
    assert values == {f"{NS}_processing_time_seconds_count": 4000, f"{NS}_processing_time_seconds_sum": 6.0}


def test_the_exposition_parses_and_a_go_counter_reads_back_under_its_name() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry)
    labels = MetricLabels("REG", "dc1", "reg")
    m.start_series(labels)
    labels.of(m.received_msgs).inc(7)
    text, _ = exported(registry)
    # As Prometheus reads it (the Python parser would name a counter's sample `_total` again).
    samples = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples[f"{NS}_total_messages"] == 7
    assert {f.name for f in text_string_to_metric_families(text)} >= GO_COUNTERS  # it parses
