""":class:`ProcessSpec`: what a :class:`~testbed.processes.supervisor.Supervisor` is to start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ProcessSpec:
    """What to run: argv, extra environment (added to ``os.environ``) and working folder."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    inherit_env: bool = True
