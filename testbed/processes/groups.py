"""Process groups: signal a whole group, and tell whether any live (non-zombie) member is left.

Every child of a :class:`~testbed.processes.supervisor.Supervisor` leads its own process group,
so stopping the group also stops anything the child forked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pgid``; a group that is gone (or not ours) is ignored."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_has_members(pgid: int) -> bool:
    """True when a non-zombie process with this process group id exists (reads /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) >= 3 and int(rest[2]) == pgid and rest[0] != "Z":
            return True
    return False


def wait_group_gone(pgid: int, timeout: float = 5.0) -> bool:
    """Wait until no process of the group is left (a SIGKILLed process dies when it is next
    scheduled: on a loaded machine, not at once); False if one still is after ``timeout``."""
    deadline = time.monotonic() + timeout
    while group_has_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
