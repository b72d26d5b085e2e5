"""The scenario runner's own logic, without servers: what it expects of a hop, what it reports,
and how it reads the samples it took. (tests/scenarios runs it on real servers.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.scenario.runner import (
    HopObservation,
    HopRef,
    Observation,
    Sampler,
    _parallel,
    _params,
    evaluate,
    expiry_wall_s,
    hop_refs,
    quiet_second,
    streams_of,
)
from harness.scenario.spec import ScenarioSpec, load_spec
from harness.scenario.truth import Truth

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "scenarios" / "smoke-steady-5k.yaml"  # one sampled hop, 150x, inspect 1h, warn 30m
TREE = ROOT / "scenarios" / "tiered-tree.yaml"  # two hops deep, several processes


def smoke() -> ScenarioSpec:
    return load_spec(SMOKE)


def test_a_sampled_hops_rules_are_its_durations_compressed_by_the_speedup() -> None:
    spec = smoke()
    (_, hop), = spec.hops()  # fmt: skip
    extractor, params = _params(hop, spec.scenario.speedup)
    assert extractor is not None and extractor.field == "sender" and extractor.force_field == "force"
    assert params is not None
    assert params.inspect_ms == 3600 * 1000 // 150 and params.warn_ms == 1800 * 1000 // 150
    assert params.size_trigger == 1024 and params.stream == hop.stream


def test_warn_duration_defaults_to_half_the_inspect_duration() -> None:
    spec = smoke()
    (_, hop), = spec.hops()  # fmt: skip
    _, params = _params(hop.model_copy(update={"warn_duration": None}), 1.0)
    assert params is not None and params.warn_ms == params.inspect_ms // 2


def test_an_unsampled_hop_has_no_rules() -> None:
    spec = smoke()
    (_, hop), = spec.hops()  # fmt: skip
    assert _params(hop.model_copy(update={"inspect_field": ""}), 1.0) == (None, None)


def test_hop_labels_are_the_entry_alone_or_process_and_entry() -> None:
    spec = smoke()
    p, hop = spec.hops()[0]
    (ref,) = hop_refs(spec, p, {hop.source: "nats://s", hop.target: "nats://t"}, ["http://m"])
    assert (ref.label, ref.source_url, ref.target_url) == (hop.name, "nats://s", "nats://t")
    assert ref.metrics_url() == "http://m"  # one instance: no need to ask who leads

    tree = load_spec(TREE)
    labels = [r.label for p in tree.processes() for r in hop_refs(tree, p, {}, ["http://m"])]
    assert len(labels) == len(set(labels)) == len(tree.hops()) > 1
    assert all("/" in label for label in labels)


def test_every_stream_a_run_fills_is_listed_once() -> None:
    tree = load_spec(TREE)
    streams = streams_of(tree)
    assert len(streams) == len(set(streams))
    for _, h in tree.hops():
        assert (h.target, h.target_name) in streams
        if h.sampling:
            assert (h.source, h.advisory_stream) in streams


def test_senders_expire_one_inspect_duration_after_their_last_message_in_wall_time() -> None:
    assert expiry_wall_s(smoke()) == pytest.approx(3600 / 150)


def test_the_quiet_second_has_no_advisory_due_in_it_or_the_next() -> None:
    final_ms = 1_000_000 * 1000
    cut = final_ms // 1000 - 3
    truth = Truth(
        [], [("n1", "timeout", cut), ("n2", "expire", cut - 1), ("n3", "new", cut - 3)], 0, final_ms
    )
    got = quiet_second({"h": (truth, 0)}, final_ms)
    due = {a[2] for a in truth.advisories}
    assert got not in due and got + 1 not in due and got < cut
    assert got == cut - 5  # the first such second going back: cut-2 is free but cut-1 is due next to it


def _observation(copies: list[int], lag: int = 0, rate: float = 500.0) -> Observation:
    truth = Truth(copied=[1, 5, 9], advisories=[], published=30, final_clock_ms=0)
    hop = HopObservation("h", truth, copies, [], final_lag=lag, max_lag=lag, processed_rate=rate)
    return Observation([hop], published=30, publish_seconds=10, publish_rate=3)


def plain(tmp_path: Path, expect: str) -> ScenarioSpec:
    """A one-hop scenario copying everything (no sampling), expecting `expect` (YAML)."""
    path = tmp_path / "plain.yaml"
    path.write_text(
        "name: plain\nseed: 1\nspeedup: 100\nduration: 10m\nfleet: {nodes: 10, data_centres: [dc1]}\n"
        f"expect: {expect}\n"
    )
    return load_spec(path)


def test_the_report_passes_exact_copies_and_names_what_is_missing_doubled_or_reordered(
    tmp_path: Path,
) -> None:
    spec = plain(tmp_path, "{copy_ratio: [5, 15]}")
    ok = evaluate(spec, _observation([1, 5, 9]))
    assert ok.ok, ok.table()
    assert ok.figures["copied"] == 3 and ok.figures["copy_ratio"] == 10

    for copies, words in (
        ([1, 9], "missing seqs"),
        ([1, 5, 5, 9], "doubled"),
        ([1, 9, 5], "out of source order"),
    ):
        bad = evaluate(spec, _observation(copies))
        (check,) = [c for c in bad.checks if c.name == "copied messages"]
        assert not bad.ok and not check.ok and words in check.detail, check


def test_the_report_fails_a_run_outside_its_expected_ratio_lag_or_rate(tmp_path: Path) -> None:
    spec = plain(tmp_path, "{copy_ratio: [20, 40], max_final_lag: 5, min_rate: 1000}")
    report = evaluate(spec, _observation([1, 5, 9], lag=6, rate=999))
    failed = {c.name for c in report.checks if not c.ok}
    assert failed == {"copy ratio (published/copied)", "final lag (messages)", "processed msg/s"}


def test_the_processed_rate_runs_from_the_first_sample_with_progress_to_the_one_at_the_last_sequence() -> (
    None
):
    s = Sampler({}, [])
    s.rows = [
        {"t": 1.0, "h.sequence": 0, "h.lag": 0},
        {"t": 2.0, "h.sequence": 100, "h.lag": 40},
        {"t": 3.0, "h.sequence": 500, "h.lag": 90},
        {"t": 4.0, "h.sequence": 1000, "h.lag": 0},
    ]
    assert s.processed_rate("h", 1000, 1000) == pytest.approx(1000 / 3)  # 2 s apart, plus the first second
    assert s.processed_rate("h", 1000, 2000) == 0.0  # never reached: no rate rather than a wrong one
    assert s.max_lag("h") == 90 and s.max_lag("other") == 0


def test_parallel_calls_run_every_one_and_raise_the_first_failure() -> None:
    ran: list[int] = []

    def fail() -> None:
        ran.append(0)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        _parallel([lambda: ran.append(1), fail, lambda: ran.append(2)])
    assert sorted(ran) == [0, 1, 2]


def test_a_hop_ref_with_one_instance_needs_no_server_to_name_its_metrics() -> None:
    spec = smoke()
    p, hop = spec.hops()[0]
    ref = HopRef("h", p, hop, "", "", ("http://only",))
    assert ref.metrics_url() == "http://only"


def test_the_report_shows_who_used_the_machine_and_the_replicators_cpu_per_message(tmp_path: Path) -> None:
    obs = _observation([1, 5, 9])
    obs.cpu_seconds = {"emulators": 4.0, "replicators: JVM": 0.002, "replicators: driver (Python)": 0.001}
    obs.cpu_percent = {"emulators": 20.0, "replicators: JVM": 0.1, "replicators: driver (Python)": 0.0}
    report = evaluate(plain(tmp_path, "{copy_ratio: [5, 15]}"), obs)
    assert report.figures["cpu_percent_of_machine_while_publishing"] == obs.cpu_percent
    assert report.figures["replicator_cpu_us_per_message"] == 100.0  # 3 ms over 30 messages read
    assert "  cpu_percent_of_machine_while_publishing: emulators=20.0, replicators: JVM=0.1" in report.table()
