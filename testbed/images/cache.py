"""The built tarballs' cache: an image is rebuilt only when what it is built from changes.

An image's tarball is ``<out_dir>/<name>-<tag>.oci.tar``; beside it, ``<...>.oci.tar.inputs`` holds
the digest of its inputs (:func:`inputs_digest`: the binaries, the CA bundle, the wheel's
sources, the interpreter, and the builder's own modules, so that changing how an image is laid
out rebuilds it too). A tarball is reused when its recorded digest is the current one
(:func:`is_fresh`); the record is written only after the tarball is in place (:func:`record`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from testbed.images.errors import MissingInputError

SUFFIX = ".oci.tar"
_CHUNK = 1 << 20
_PACKAGE = Path(__file__).resolve().parent


def tarball_path(out_dir: Path, name: str, tag: str) -> Path:
    """Where the image ``name:tag`` is written in ``out_dir``."""
    return out_dir / f"{name}-{tag}{SUFFIX}"


def _inputs_file(tarball: Path) -> Path:
    return tarball.with_name(tarball.name + ".inputs")


def builder_sources(*modules: str) -> list[tuple[str, bytes | Path]]:
    """The named modules of this package (``"ocipack"``...), as inputs: a change in how an image
    is built changes its digest."""
    return [(f"builder:{module}", _PACKAGE / f"{module}.py") for module in modules]


def inputs_digest(inputs: Iterable[tuple[str, bytes | Path]]) -> str:
    """The SHA-256 of labelled inputs, each either bytes or a file (read in full)."""
    h = hashlib.sha256()
    for label, value in inputs:
        h.update(label.encode() + b"\0")
        if isinstance(value, Path):
            if not value.is_file():
                raise MissingInputError(f"{label}: {value} is not a file")
            h.update(b"file\0")
            with open(value, "rb") as data:
                while chunk := data.read(_CHUNK):
                    h.update(chunk)
        else:
            h.update(b"bytes\0" + str(len(value)).encode() + b"\0" + value)
        h.update(b"\0")
    return h.hexdigest()


def is_fresh(tarball: Path, digest: str) -> bool:
    """Whether ``tarball`` exists and was built from inputs of this digest."""
    try:
        return tarball.is_file() and _inputs_file(tarball).read_text().strip() == digest
    except FileNotFoundError:
        return False


def record(tarball: Path, digest: str) -> None:
    """Note that ``tarball`` (already in place) was built from inputs of this digest."""
    inputs = _inputs_file(tarball)
    partial = inputs.with_name(inputs.name + f".{os.getpid()}")
    partial.write_text(digest + "\n")
    os.replace(partial, inputs)


def forget(tarball: Path) -> None:
    """Drop the record before rebuilding, so a half-written rebuild is never taken as fresh."""
    _inputs_file(tarball).unlink(missing_ok=True)
