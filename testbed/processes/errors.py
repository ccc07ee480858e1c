"""The exceptions the process supervisor raises: :class:`ProcessError` and :class:`NotReadyError`."""

from __future__ import annotations


class ProcessError(RuntimeError):
    """A test bed process could not be started or run a command successfully."""


class NotReadyError(ProcessError):
    """A process exited or timed out before it was ready; the message carries its log tail."""
