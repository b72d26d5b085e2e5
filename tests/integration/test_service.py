"""The container image's entry point and health check, run as plain processes (no container
builder can run on these machines: docs/operations.md), with the service's log file rotated
by logrotate while the replicator writes it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import PACKAGING, SLOW_S, containerfile_instruction, orders_backlog, run, wait_for

from harness.process import ReplicatorProcess
from harness.streams import count_messages as count

pytestmark = pytest.mark.integration

IMAGE_CONFIG = "/etc/stream-replicator/sr.yaml"


def image_command(instruction: str, config: Path) -> list[str]:
    """ENTRYPOINT or HEALTHCHECK CMD of the Containerfile, its config path mapped to `config`."""
    args = containerfile_instruction(instruction)
    argv = json.loads(args.split("CMD", 1)[1] if instruction == "HEALTHCHECK" else args)
    return [str(config) if a == IMAGE_CONFIG else a for a in argv]


def image_env() -> dict[str, str]:
    # The image puts the venv's scripts first on PATH; here, this venv's.
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")


def health(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        image_command("HEALTHCHECK", config), capture_output=True, text=True, env=image_env()
    )


def test_the_images_entry_point_copies_answers_its_health_check_and_survives_log_rotation(
    source_server, nats_server, tmp_path: Path
) -> None:
    cfg, n = orders_backlog(source_server.url, nats_server.url, tmp_path, 1_000, batch_max_messages=200)
    logfile = tmp_path / "log" / "replicator.log"
    logfile.parent.mkdir()
    data = yaml.safe_load(cfg.read_text())
    data["logfile"] = str(logfile)
    cfg.write_text(yaml.safe_dump(data))
    assert health(cfg).returncode == 1  # nothing answers yet

    entry = image_command("ENTRYPOINT", cfg)
    rep = ReplicatorProcess(cfg, tmp_path / "console.log", env=image_env(), command=entry[:-2])
    rep.start(wait=False)
    try:
        wait_for(lambda: run(count(nats_server.url, "ORDERS")) >= n, SLOW_S, "the copy", rep)
        ok = health(cfg)
        assert ok.returncode == 0 and ok.stdout.endswith("/healthz: 200 ok\n"), ok.stdout + ok.stderr

        logrotate = shutil.which("logrotate") or "/usr/sbin/logrotate"
        conf = tmp_path / "logrotate.conf"
        rules = (PACKAGING / "logrotate" / "stream-replicator").read_text()
        conf.write_text(rules.replace("/var/log/stream-replicator", str(logfile.parent)))
        rotated = subprocess.run(
            [logrotate, "-f", "-s", str(tmp_path / "lr.state"), str(conf)], capture_output=True, text=True
        )
        assert rotated.returncode == 0, rotated.stderr
        assert "replicating to ORDERS" in (logfile.parent / "replicator.log.1").read_text()
        assert logfile.stat().st_size == 0  # copytruncate: the replicator keeps writing the same file
    finally:
        assert rep.stop() == 0, rep.output()
    after = logfile.read_text()
    assert after.startswith(after.lstrip("\0")), "no hole of NULs where the old content was"
    assert "stopped" in after  # lines written after the rotation land in the live file
    assert health(cfg).returncode == 1
