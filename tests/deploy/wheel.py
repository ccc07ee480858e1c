"""The runtime wheel, built the way the Dockerfile's ``wheel`` stage builds it.

No image can be built here (no registry, no daemon), so the checks do what that stage does,
short of the container: copy what its ``COPY`` lines copy (read from the Dockerfile itself, so
the two cannot drift apart), and run its ``pip wheel --no-deps``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from .manifests import DOCKERFILE, REPO


def wheel_stage_sources(dockerfile: str) -> list[str]:
    """The build-context paths the ``wheel`` stage copies, in order."""
    stage = re.search(r"^FROM .* AS wheel$(.*?)(?=^FROM )", dockerfile, re.M | re.S)
    assert stage, "the Dockerfile has no stage named 'wheel'"
    sources: list[str] = []
    for line in stage.group(1).splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"]:
            sources.extend(p for p in parts[1:-1] if not p.startswith("--"))
    return sources


def build_wheel(work: Path) -> Path:
    """Copy the stage's sources into ``work/src``, build the wheel into ``work/wheels``."""
    src = work / "src"
    src.mkdir()
    for name in wheel_stage_sources(DOCKERFILE.read_text(encoding="utf-8")):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(source, src / name)
    wheels = work / "wheels"
    build = subprocess.run(
        # No build isolation: the backend comes from the test install, as the suite runs offline.
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("kubeopera_tenants-*.whl")
    return wheel


def install_wheel(wheel: Path, site: Path) -> None:
    """Install the wheel alone (no dependencies) into the folder ``site``."""
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr
