"""The interpreter-wide record of what the supervisors started, and the clean-up at exit.

Every :class:`~testbed.processes.managed.ManagedProcess` any supervisor starts is remembered
here (exactly one registry per interpreter): :func:`surviving_processes` lists those that still
have a live process in their group, which is how the tests prove that nothing is left behind,
and :func:`stop_everything` - registered with ``atexit`` on import - stops whatever still runs.
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING

from testbed.processes.managed import ManagedProcess

if TYPE_CHECKING:
    from testbed.processes.supervisor import Supervisor

_all_processes: list[ManagedProcess] = []
_all_lock = threading.Lock()
_live_supervisors: set[Supervisor] = set()


def record_process(process: ManagedProcess) -> None:
    """Remember a process a supervisor has just started."""
    with _all_lock:
        _all_processes.append(process)


def record_supervisor(supervisor: Supervisor) -> None:
    """``supervisor`` has started a process: :func:`stop_everything` closes it if still open."""
    _live_supervisors.add(supervisor)


def forget_supervisor(supervisor: Supervisor) -> None:
    """``supervisor`` has closed: :func:`stop_everything` need not close it again."""
    _live_supervisors.discard(supervisor)


def all_processes() -> list[ManagedProcess]:
    """Every process any supervisor started in this interpreter, in start order."""
    with _all_lock:
        return list(_all_processes)


def surviving_processes() -> list[ManagedProcess]:
    """Processes started here whose process group still has a live member."""
    return [p for p in all_processes() if p.group_alive()]


def stop_everything(grace: float = 5.0) -> None:
    """Stop every process still running, newest first (used at exit and after a signal)."""
    for supervisor in list(_live_supervisors):
        supervisor.close()
    for process in reversed(all_processes()):
        if process.group_alive():
            process.stop(grace)


atexit.register(stop_everything)
