"""The CI smoke scenario on real servers, and proof that a wrong expectation fails readably."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.scenario.runner import evaluate, run_scenario
from harness.scenario.spec import Expect, load_spec

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_scenario_passes_and_a_wrong_expectation_fails_with_a_readable_diff(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "scenarios" / "smoke-steady-5k.yaml")
    report, obs = run_scenario(spec, tmp_path)
    print(report.table())
    assert report.ok, report.table()
    names = {c.name for c in report.checks}
    assert {"copied messages", "advisories (event, value, time)", "copy ratio (published/copied)"} <= names
    assert obs.published == obs.hops[0].truth.published >= 5_000 * 23  # every node, every 300 s, for 2 h
    assert (tmp_path / "smoke-steady-5k.json").exists() and (
        tmp_path / "smoke-steady-5k.png"
    ).stat().st_size > 5000

    # The same observation judged against wrong expectations: the runner's checks fail, and say why.
    wrong = spec.model_copy(update={"expect": Expect(copy_ratio=(20, 30), events={"recover": (5, 10)})})
    bad = evaluate(wrong, obs)
    assert not bad.ok
    table = bad.table()
    assert "FAIL" in table.splitlines()[0]
    rows = {
        ln.split("  ")[1].strip(): ln
        for ln in table.splitlines()[2:]
        if ln.startswith("  ") and "  " in ln[2:]
    }
    ratio_row = next(ln for name, ln in rows.items() if name.startswith("copy ratio"))
    assert "20.0-30.0" in ratio_row and ratio_row.endswith("FAIL")
    recover_row = next(ln for name, ln in rows.items() if name.startswith("recover advisories"))
    assert "5-10" in recover_row and recover_row.split()[-2] == "0" and recover_row.endswith("FAIL")

    # A missing copy and a doubled advisory are named in the diff.
    hop = obs.hops[0]
    hop.copies = hop.copies[1:]
    hop.advisories = [*hop.advisories, hop.advisories[0]]
    broken = evaluate(spec, obs)
    text = broken.table()
    assert not broken.ok
    assert f"missing seqs {hop.truth.copied[0]}" in text
    assert "unexpected or doubled" in text
