"""The runtime wheel, built the way the Dockerfile's ``wheel`` stage builds it.

No image can be built here (no registry, no daemon), so the checks do what that stage does,
short of the container: copy what its ``COPY`` lines copy and run its ``pip wheel --no-deps``,
with the test bed's own builder (:func:`testbed.images.wheel.build_wheel`), whose list of
sources is compared with the stage's ``COPY`` lines (read from the Dockerfile itself).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from testbed.images.wheel import build_wheel as testbed_build_wheel

from .manifests import REPO


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
    """The wheel as the test bed builds it for the function image (``work/src`` -> ``work/wheels``);
    its sources are the stage's ``COPY`` lines (tests/deploy/test_function_image.py checks)."""
    return testbed_build_wheel(REPO, work)


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
