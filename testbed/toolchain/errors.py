"""The toolchain's one error: a tool could not be built or found."""

from __future__ import annotations


class ToolchainError(RuntimeError):
    """A tool could not be built or found; the message says which and why."""
