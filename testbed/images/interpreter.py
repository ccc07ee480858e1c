"""The CPython interpreter of the function image: this process's base installation, moved under
``/usr/local`` as python:3.11-slim lays it out, with its standard library and its bytecode.

A plain CPython build finds its prefix from where its executable is (the landmark
``lib/python3.11/os.py``), so moved under ``/usr/local`` it runs as it ran; a distribution's patched
build (Debian's, whose ``site`` module looks in ``dist-packages``) is refused
(:func:`current_interpreter`). :func:`copy_interpreter` copies the executable, its ``python3`` and
``python`` links and the standard library without its tests, ``idlelib``, ``tkinter``,
``turtledemo``, ``ensurepip``, ``lib2to3``, the static library's ``config-3.11-*`` folder and this
machine's bytecode; :func:`compile_bytecode` compiles the standard library and the packages for
their paths in the image. Its shared libraries are :mod:`.libraries`'.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testbed.images import command
from testbed.images.errors import InterpreterError
from testbed.images.rootfs import at, copy_file, make_dir, symlink

# Where python:3.11-slim installs Python (the interpreter, its library and the packages' scripts).
PREFIX = "/usr/local"

# Left out of the standard library: folders anywhere, folders at its top, C modules by prefix.
_SKIP_ANYWHERE = frozenset({"__pycache__", "test", "tests", "idle_test"})
_SKIP_TOP = frozenset({"idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages"})
_SKIP_DYNLOAD = ("_test", "_ctypes_test", "_tkinter", "xxlimited", "_xxtestfuzz")
_COMPILE_TIMEOUT = 600.0


@dataclass(frozen=True)
class Interpreter:
    """A CPython installation that can be moved under ``/usr/local``: ``<prefix>/bin/pythonX.Y``,
    ``<prefix>/lib/pythonX.Y`` and, for a shared build, ``<prefix>/lib/<libpython>``."""

    prefix: Path
    version: str  # "3.11"
    libpython: str | None  # "libpython3.11.so.1.0" for a --enable-shared build

    @property
    def executable(self) -> Path:
        return self.prefix / "bin" / f"python{self.version}"

    @property
    def stdlib(self) -> Path:
        return self.prefix / "lib" / f"python{self.version}"

    @property
    def image_executable(self) -> str:
        return f"{PREFIX}/bin/python{self.version}"

    @property
    def image_site_packages(self) -> str:
        return f"{PREFIX}/lib/python{self.version}/site-packages"


def current_interpreter() -> Interpreter:
    """This process's base CPython (the venv's ``home``), checked to be movable."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if version != "3.11":
        raise InterpreterError(f"the image runs Python 3.11 (python:3.11-slim), this is {version}")
    patched = {"posix_local", "deb_system"} & set(sysconfig.get_scheme_names())
    if patched:
        raise InterpreterError(
            f"{sys.base_prefix} is a distribution's patched build (install schemes {sorted(patched)}; its"
            " site module looks in dist-packages), which cannot be laid out as python:slim's; run from"
            " a venv of a plain CPython (pyenv's)"
        )
    shared = bool(sysconfig.get_config_var("Py_ENABLE_SHARED"))
    interpreter = Interpreter(
        Path(sys.base_prefix), version, str(sysconfig.get_config_var("INSTSONAME")) if shared else None
    )
    needed = [interpreter.executable, interpreter.stdlib / "os.py"]
    if interpreter.libpython:
        needed.append(interpreter.prefix / "lib" / interpreter.libpython)
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise InterpreterError(f"{interpreter.prefix} is not a CPython installation: no {', '.join(missing)}")
    return interpreter


def _stdlib_ignore(stdlib: Path) -> Callable[[str, list[str]], set[str]]:
    dynload = stdlib / "lib-dynload"

    def ignore(folder: str, names: list[str]) -> set[str]:
        here = Path(folder)
        skipped = {n for n in names if n in _SKIP_ANYWHERE or n.endswith(".pyc")}
        if here == stdlib:
            skipped |= {n for n in names if n in _SKIP_TOP or n.startswith("config-")}
        if here == dynload:
            skipped |= {n for n in names if n.startswith(_SKIP_DYNLOAD)}
        return skipped

    return ignore


def copy_interpreter(interpreter: Interpreter, rootfs: Path) -> None:
    """The interpreter, its links and its standard library, under ``/usr/local``."""
    copy_file(rootfs, interpreter.image_executable, interpreter.executable, 0o755)
    symlink(rootfs, f"{PREFIX}/bin/python3", f"python{interpreter.version}")
    symlink(rootfs, f"{PREFIX}/bin/python", "python3")
    make_dir(rootfs, f"{PREFIX}/lib")
    shutil.copytree(
        interpreter.stdlib,
        at(rootfs, f"{PREFIX}/lib/python{interpreter.version}"),
        symlinks=True,
        ignore=_stdlib_ignore(interpreter.stdlib),
    )
    make_dir(rootfs, interpreter.image_site_packages)


def compile_bytecode(rootfs: Path, interpreter: Interpreter) -> None:
    """Compile the standard library and the packages for their paths in the image (unchecked-hash
    ``.pyc``: no source timestamps); a file that does not compile is left as source."""
    lib = f"{PREFIX}/lib/python{interpreter.version}"
    command.run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            "-d",
            lib,
            at(rootfs, lib),
        ],
        timeout=_COMPILE_TIMEOUT,
        check=False,  # exit 1 if any file failed: those are imported from source, as without bytecode
    )
