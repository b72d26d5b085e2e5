"""The service files in packaging/ are what they claim: the default config validates, the
systemd unit passes systemd-analyze (clean, and hardened), logrotate accepts its file, and the
container image runs as a non-root user with /healthz as its health check."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import PACKAGING, containerfile_instruction

CLI = Path(sys.executable).with_name("stream-replicator")


def test_the_commented_default_config_validates() -> None:
    done = subprocess.run(
        [str(CLI), "validate", "--config", str(PACKAGING / "config" / "sr.yaml")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("ok (1 stream)\n")


def unit_with_real_binary(tmp_path: Path) -> Path:
    """The unit with its ExecStart pointing at this venv's script (verify checks it exists)."""
    text = (PACKAGING / "systemd" / "stream-replicator.service").read_text()
    unit = tmp_path / "stream-replicator.service"
    unit.write_text(text.replace("/opt/stream-replicator/bin/stream-replicator", str(CLI)))
    return unit


def test_the_systemd_unit_verifies_cleanly_and_is_hardened(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: .ci/run installs it (apt-get install systemd)"
    unit = unit_with_real_binary(tmp_path)
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr  # no unknown key, no warning
    text = unit.read_text()
    for needed in ("DynamicUser=yes", "StateDirectory=stream-replicator", "Restart=on-failure",
                   "RestartPreventExitStatus=2", "KillMode=mixed", "NoNewPrivileges=yes"):  # fmt: skip
        assert needed in text
    assert "\nMemoryDenyWriteExecute=" not in text  # the JVM's JIT writes code
    security = subprocess.run(
        [analyze, "security", "--offline=true", "--no-pager", str(unit)], capture_output=True, text=True
    )
    m = re.search(r"Overall exposure level for stream-replicator\.service: ([\d.]+)", security.stdout)
    assert m, security.stdout[-2000:] + security.stderr
    assert float(m.group(1)) <= 4.0, security.stdout[-3000:]


def test_logrotate_accepts_the_rotation_file(tmp_path: Path) -> None:
    logrotate = shutil.which("logrotate") or "/usr/sbin/logrotate"
    assert Path(logrotate).exists(), "logrotate is missing: .ci/run installs it (apt-get install logrotate)"
    logs = tmp_path / "log"
    logs.mkdir()
    (logs / "replicator.log").write_text("a line\n")
    conf = tmp_path / "logrotate.conf"
    conf.write_text(
        (PACKAGING / "logrotate" / "stream-replicator")
        .read_text()
        .replace("/var/log/stream-replicator", str(logs))
    )
    done = subprocess.run(
        [logrotate, "-d", "-s", str(tmp_path / "state"), str(conf)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr.lower(), done.stderr


def test_the_container_runs_as_a_non_root_user_with_a_health_check() -> None:
    assert containerfile_instruction("USER") not in ("root", "0")
    health = containerfile_instruction("HEALTHCHECK")
    assert json.loads(health.split("CMD", 1)[1]) == [
        "stream-replicator", "health", "--config", "/etc/stream-replicator/sr.yaml"
    ]  # fmt: skip
    assert json.loads(containerfile_instruction("ENTRYPOINT"))[:2] == ["stream-replicator", "run"]
    assert "openjdk-17-jre-headless" in containerfile_instruction("RUN apt-get update")


def test_a_stop_gives_up_before_the_unit_would_kill_it() -> None:
    """operations.md: a stop not done 45 s after SIGTERM exits 1, inside the unit's
    TimeoutStopSec (60): the replicator names the step it was stuck in before systemd's SIGKILL
    ends it without a word."""
    from replicator.runner import STOP_DEADLINE_S

    unit = (PACKAGING / "systemd" / "stream-replicator.service").read_text()
    timeout_stop = re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M)
    assert timeout_stop, "the unit sets no TimeoutStopSec"
    assert STOP_DEADLINE_S == 45.0 < int(timeout_stop.group(1)) == 60
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text().split())
    assert (
        "a stop not done 45 s after SIGTERM (inside the shipped unit's `TimeoutStopSec=60`) exits 1" in docs
    )
