"""The error the local stack raises when it cannot start."""

from __future__ import annotations


class StackError(RuntimeError):
    """The local pipeline could not start; the message says which part and why."""
