"""The errors of :mod:`testbed.images`: one base class, :class:`ImageError`, and what went wrong."""

from __future__ import annotations


class ImageError(Exception):
    """An image could not be built or imported; the message says which and why."""


class MissingInputError(ImageError):
    """A file an image is built from (a binary, the CA bundle, a source folder) is not there."""


class InterpreterError(ImageError):
    """The Python interpreter cannot be laid out as python:3.11-slim has it (a distribution's
    patched build, a shared library ``ldd`` cannot find)."""


class DependencyError(ImageError):
    """A runtime dependency of the wheel is not installed, or not at a version it accepts, in the
    environment the image's packages are copied from."""


class CommandError(ImageError):
    """A command (pip, ldd, ctr) failed or did not finish in time; the message carries its stderr."""
