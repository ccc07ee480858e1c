"""The shared libraries of the function image: every one ``ldd`` names for the interpreter, the C
modules of the standard library and of the packages, and the extra binaries (``/bin/sh``), at the
path ``ldd`` found it, plus the loader.

The interpreter's own (``libpython3.11.so.1.0`` of an ``--enable-shared`` build) goes under
``/usr/local/lib`` as python:3.11-slim has it. Its RUNPATH names its build prefix, which the image
has not; the loader finds the library through a link from its first search folder (libc's),
python:slim's ld.so.cache being out of reach without running ``ldconfig``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from testbed.images import command
from testbed.images.errors import InterpreterError
from testbed.images.interpreter import PREFIX, Interpreter
from testbed.images.rootfs import at, copy_file, symlink

_LDD_BATCH = 64


def _ldd(files: Sequence[Path]) -> set[Path]:
    """The shared libraries (and the loader) the loader would load for ``files``."""
    libraries: set[Path] = set()
    for start in range(0, len(files), _LDD_BATCH):
        batch = list(files[start : start + _LDD_BATCH])
        output = command.run(["ldd", *batch], timeout=120)
        current = str(batch[0])
        for line in output.splitlines():
            text = line.strip()
            if not line.startswith(("\t", " ")) and text.endswith(":"):
                current = text[:-1]
                continue
            name, arrow, where = text.partition("=>")
            if arrow:
                path = where.strip().split(" (")[0].strip()
                if path == "not found":
                    raise InterpreterError(f"{current} needs {name.strip()}, which ldd cannot find")
                if path:
                    libraries.add(Path(path))
            elif text.startswith("/"):
                libraries.add(Path(text.split(" (")[0]))
    return libraries


def copy_libraries(rootfs: Path, interpreter: Interpreter, extra_binaries: Iterable[Path]) -> None:
    """Copy what ``ldd`` names for the interpreter, every C module in the image and the extra
    binaries; libraries of the interpreter's installation go under ``/usr/local`` and get a link
    in the loader's first search folder, the packages' own (``*.libs``) are there already."""
    site = at(rootfs, interpreter.image_site_packages)
    objects = [interpreter.executable, *extra_binaries]
    objects += sorted(at(rootfs, f"{PREFIX}/lib").rglob("*.so"))
    if interpreter.libpython:
        objects.append(interpreter.prefix / "lib" / interpreter.libpython)
    libc_dirs: set[str] = set()
    moved: list[str] = []
    for library in sorted(_ldd(objects)):
        if library.is_relative_to(site) or library.is_relative_to(Path(sys.prefix)):
            continue  # a package's own library, copied with it
        if library.is_relative_to(interpreter.prefix):
            image_path = f"{PREFIX}/{library.relative_to(interpreter.prefix).as_posix()}"
            moved.append(image_path)
        else:
            image_path = library.as_posix()
        if library.name.startswith("libc.so."):
            libc_dirs.add(library.parent.as_posix())
        if not os.path.lexists(at(rootfs, image_path)):
            copy_file(rootfs, image_path, library)
    if moved and len(libc_dirs) != 1:
        raise InterpreterError(f"cannot tell the loader's search folder: libc found in {sorted(libc_dirs)}")
    for image_path in moved:
        name = PurePosixPath(image_path).name
        symlink(rootfs, f"{next(iter(libc_dirs))}/{name}", image_path)
