"""The CPU of named groups of process trees over a run (the scenario report's)."""

from __future__ import annotations

import subprocess
import sys

from harness.proctree import GroupCpu


def test_each_groups_cpu_is_its_trees_and_the_rest_is_the_machines() -> None:
    """A child that burns 0.3 s of CPU, then waits: its group has that much, a group with
    no process none, and the machine's other work is "rest of the machine"."""
    burn = "import time\nwhile time.process_time() < 0.3: pass\nprint('done', flush=True)\ntime.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    cpu = GroupCpu(lambda: {"burner": [child.pid], "nobody": []}, split=frozenset({"burner"}), interval=0.1)
    try:
        cpu.start()
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        seconds = cpu.stop()
    finally:
        child.kill()
        child.wait()
    burner = sum(v for k, v in seconds.items() if k.startswith("burner: "))
    assert 0.2 <= burner <= 1.0, seconds  # what it burnt after start(), in whole ticks
    assert "nobody" not in seconds and "rest of the machine" in seconds
    assert set(cpu.shares()) == set(seconds)
