"""The node's errors: :class:`NodeError`, what stops the node from starting or running here."""

from __future__ import annotations

from testbed.processes import ProcessError


class NodeError(ProcessError):
    """The node cannot start (the machine lacks something, another copy runs) or broke while running."""
