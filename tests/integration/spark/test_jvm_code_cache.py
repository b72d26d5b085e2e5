"""The Spark JVM that build_session launches keeps room for its compiled code, unless the config
says otherwise.

C1 only (`-XX:TieredStopAtLevel=1`) shrinks the JVM's default code cache to 48 MB, which a
sampled query's code nearly fills under load, and then filled ("CodeCache is full. Compiler has
been disabled", docs/performance.md 2026-12-07, tenth session). replicator.spark.jvm asks for
240 MB; a `spark.driver.extraJavaOptions` in the config still wins, as for every JVM option.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = """
from replicator.spark.session import build_session
spark = build_session('local[1]', 'code-cache', conf={conf!r}, light_jvm={light})
jvm = spark.sparkContext._jvm
management = jvm.java.lang.management.ManagementFactory
# One pool ("CodeCache") under C1 only; three segments ("CodeHeap '...'") when segmented.
sizes = [p.getUsage().getMax() for p in management.getMemoryPoolMXBeans()
         if p.getType().toString() == 'Non-heap memory' and 'code' in p.getName().lower()]
flags = [str(f) for f in management.getRuntimeMXBean().getInputArguments()]
print('tiered-stop', '-XX:TieredStopAtLevel=1' in flags)
print('code-cache', sum(sizes))
spark.stop()
"""


@pytest.mark.parametrize(
    ("light", "conf", "expected_mb"),
    [
        (False, {}, 240),  # 48 without the size in replicator.spark.jvm.C1_ONLY: the JVM's C1-only default
        (True, {"spark.driver.extraJavaOptions": "-XX:ReservedCodeCacheSize=64m"}, 64),
    ],
    ids=["sampled", "copy-only-with-the-configs-size"],
)
def test_a_c1_only_jvm_keeps_the_code_cache_it_is_given(
    light: bool, conf: dict[str, str], expected_mb: int
) -> None:
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(light=light, conf=conf)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    facts = dict(
        line.split(" ", 1)
        for line in out.stdout.splitlines()
        if line.startswith(("tiered-stop", "code-cache"))
    )
    assert facts["tiered-stop"] == "True"
    assert int(facts["code-cache"]) == expected_mb << 20
