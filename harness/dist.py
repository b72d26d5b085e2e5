"""`make dist`: the artifacts a user installs or submits, built from this checkout.

- the wheel and the sdist (`python -m build`);
- `stream-replicator-env.tar.gz`: a packed virtual environment for Spark executors
  (`spark-submit --archives ...#environment`), made with venv-pack from a new venv that has the
  wheel installed, without pyspark and py4j: the cluster's Spark provides those;
- `stream_replicator_submit.py`: the application file spark-submit runs (replicator/submit.py).

The packed environment holds no Python interpreter: its `bin/python` links to the one it was
built with, so every Spark worker needs Python 3.11 at that same path (docs/operations.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_ARCHIVE = "stream-replicator-env.tar.gz"
SUBMIT_FILE = "stream_replicator_submit.py"
# Provided by the Spark installation on every worker (its python/lib zips).
NOT_PACKED = ("pyspark", "py4j")


@dataclass
class Artifacts:
    wheel: Path
    sdist: Path
    env_archive: Path
    submit_file: Path
    venv: Path  # the new venv the wheel was installed into (and packed from)
    seconds: dict[str, float] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        return {
            p.name: p.stat().st_size for p in (self.wheel, self.sdist, self.env_archive, self.submit_file)
        }


def _run(cmd: list[str], **kw: object) -> None:
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def build(outdir: Path, venv: Path | None = None, python: str = sys.executable) -> Artifacts:
    """Build every artifact into `outdir`; the venv for the packed environment is `venv`
    (default: outdir/.env-build, removed and made anew)."""
    outdir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t = time.monotonic()
    _run([python, "-m", "build", "--outdir", str(outdir), str(ROOT)], stdout=subprocess.DEVNULL)
    seconds["build"] = time.monotonic() - t
    from replicator import __version__

    wheel = outdir / f"stream_replicator-{__version__}-py3-none-any.whl"
    sdist = outdir / f"stream_replicator-{__version__}.tar.gz"
    venv = venv or outdir / ".env-build"
    shutil.rmtree(venv, ignore_errors=True)
    t = time.monotonic()
    # The interpreter itself, not a venv's: the packed env's bin/python links to it.
    base = subprocess.run(
        [python, "-c", "import sys; print(sys._base_executable)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    _run([base, "-m", "venv", str(venv)])
    # --no-compile: byte-compiling every dependency (pyspark's many modules) took half the
    # install; Python compiles what a run imports, once, when it first imports it.
    _run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-compile", "--disable-pip-version-check",
          str(wheel)])  # fmt: skip
    seconds["install"] = time.monotonic() - t
    archive = outdir / ENV_ARCHIVE
    t = time.monotonic()
    excludes = [arg for pkg in NOT_PACKED for arg in ("--exclude", f"lib/python*/site-packages/{pkg}/*")]
    excludes += [arg for pkg in NOT_PACKED for arg in ("--exclude", f"lib/python*/site-packages/{pkg}-*")]
    _run(
        [python, "-m", "venv_pack", "--prefix", str(venv), "--output", str(archive), "--force", "--quiet",
         *excludes]
    )  # fmt: skip
    seconds["pack"] = time.monotonic() - t
    submit = outdir / SUBMIT_FILE
    shutil.copyfile(ROOT / "replicator" / "submit.py", submit)
    return Artifacts(wheel, sdist, archive, submit, venv, seconds)


def main() -> None:
    out = ROOT / "dist"
    a = build(out)
    shutil.rmtree(a.venv)  # packed; ~900 MB
    for name, size in a.sizes().items():
        print(f"dist/{name}: {size / 1e6:,.1f} MB")
    print("took " + ", ".join(f"{k} {v:.0f} s" for k, v in a.seconds.items()))


if __name__ == "__main__":
    main()
