"""The runtime wheel of the function image, built as the Dockerfile's ``wheel`` stage builds it and
installed by pip into the image's ``/usr/local``.

Its sources (:data:`WHEEL_SOURCES`, the stage's ``COPY`` lines; tests/deploy checks they agree) are
copied to a scratch folder, then ``pip wheel --no-deps`` (:func:`build_wheel`); ``pip install
--no-deps --root <rootfs> --prefix /usr/local`` installs it alone (:func:`install_wheel`), its
dependencies being :mod:`.distributions`'.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from testbed.images import command
from testbed.images.errors import ImageError, MissingInputError
from testbed.images.interpreter import PREFIX

REPO = Path(__file__).resolve().parents[2]
# What the Dockerfile's `wheel` stage copies into its build folder (tests/deploy checks they agree).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "shared", "functions")
DIST_NAME = "kubeopera-tenants"
_PIP_TIMEOUT = 600.0


def source_files(repo: Path) -> Iterator[Path]:
    """The files of the wheel's sources, sorted, without bytecode."""
    for name in WHEEL_SOURCES:
        source = repo / name
        if source.is_file():
            yield source
        elif source.is_dir():
            yield from sorted(
                p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            )
        else:
            raise MissingInputError(f"{source} (a source of the wheel) is missing")


def build_wheel(repo: Path, work: Path) -> Path:
    """Build the runtime wheel as the Dockerfile's ``wheel`` stage does: its sources copied into a
    scratch folder, then ``pip wheel --no-deps`` (no build isolation: no package index here)."""
    src = work / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in WHEEL_SOURCES:
        if (repo / name).is_dir():
            shutil.copytree(repo / name, src / name, ignore=ignore)
        else:
            shutil.copyfile(repo / name, src / name)
    wheels = work / "wheels"
    command.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            wheels,
            src,
        ],
        timeout=_PIP_TIMEOUT,
    )
    built = sorted(wheels.glob("kubeopera_tenants-*.whl"))
    if len(built) != 1:
        raise ImageError(f"pip wheel made {[p.name for p in built]}, expected one kubeopera_tenants wheel")
    return built[0]


def install_wheel(wheel: Path, rootfs: Path) -> None:
    """``pip install`` the wheel alone into the image's ``/usr/local``."""
    command.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--ignore-installed",
            "--no-warn-script-location",
            "--root",
            rootfs,
            "--prefix",
            PREFIX,
            wheel,
        ],
        timeout=_PIP_TIMEOUT,
    )
