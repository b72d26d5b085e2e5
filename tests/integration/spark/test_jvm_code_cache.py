"""The Spark JVM the replicator launches keeps room for its compiled code.

C1 only (`-XX:TieredStopAtLevel=1`) shrinks the JVM's default code cache to 48 MB, which a
sampled query's code filled under load ("CodeCache is full. Compiler has been disabled",
docs/performance.md 2026-12-07, tenth session). Each kind of session, launched as the runner
launches it, must report the code cache replicator.spark.jvm asks for.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

# The JVM's own tiered default, which replicator.spark.jvm.CODE_CACHE keeps under C1 only.
EXPECTED_BYTES = 240 << 20

SCRIPT = """
import sys
from replicator.spark.session import build_session
spark = build_session('local[1]', 'code-cache', light_jvm={light})
jvm = spark.sparkContext._jvm
sizes = [p.getUsage().getMax() for p in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
         if p.getType().toString() == 'Non-heap memory' and 'code' in p.getName().lower()]
flags = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
print('tiered-stop', any(str(f) == '-XX:TieredStopAtLevel=1' for f in flags))
print('code-cache', sum(sizes))
spark.stop()
"""


@pytest.mark.parametrize("light", [True, False], ids=["copy-only", "sampled"])
def test_a_c1_only_jvm_keeps_the_default_tiered_code_cache(light: bool) -> None:
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(light=light)],
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
    # 48 MB (49,152 KB) without the option: the JVM's C1-only default.
    assert int(facts["code-cache"]) == EXPECTED_BYTES
