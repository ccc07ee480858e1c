""":class:`ManagedProcess`: one started child, leader of its own process group, with its log file.

It can be polled, read (its log, or the log's tail) and stopped: SIGTERM to the group, SIGKILL
after a grace period (:meth:`ManagedProcess.stop`), or SIGKILL at once (:meth:`ManagedProcess.kill`).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from testbed.processes.groups import group_has_members, signal_group, wait_group_gone
from testbed.processes.spec import ProcessSpec

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 10.0
# How long a process group may take to go after SIGKILL (see ManagedProcess.stop).
GROUP_GONE_SECONDS = 30.0
LOG_TAIL_LINES = 60


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file (empty when it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 256 * 1024))
            data = handle.read()
    except FileNotFoundError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """One child process started by a :class:`~testbed.processes.supervisor.Supervisor`, leader
    of its own process group."""

    def __init__(self, spec: ProcessSpec, popen: subprocess.Popen[bytes], log_path: Path, log_offset: int = 0) -> None:
        self.spec = spec
        self.name = spec.name
        self.popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # start_new_session=True: the child leads a new session and group
        self.log_path = log_path
        self.log_offset = log_offset  # where this run's output starts (the log file is appended to)
        self.started_at = time.monotonic()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ManagedProcess {self.name} pid={self.pid} rc={self.popen.returncode}>"

    def poll(self) -> int | None:
        """The exit code if the process has exited (and reap it), else None."""
        return self.popen.poll()

    def running(self) -> bool:
        """The leader process has not exited."""
        return self.poll() is None

    def group_alive(self) -> bool:
        """Some process of this child's process group still exists (the leader is reaped first)."""
        self.poll()
        return group_has_members(self.pgid)

    def log_text(self) -> str:
        """Everything this run of the process has logged so far."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self.log_offset)
                return handle.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of this process's log."""
        return tail(self.log_path, lines)

    def stop(self, grace: float = DEFAULT_GRACE_SECONDS) -> int | None:
        """SIGTERM the group, SIGKILL it after ``grace`` seconds; return the leader's exit code."""
        with self._lock:
            if self.popen.returncode is None:
                signal_group(self.pgid, signal.SIGTERM)
                try:
                    self.popen.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    log.warning("%s (pid %d) ignored SIGTERM for %.0fs; killing it", self.name, self.pid, grace)
                    signal_group(self.pgid, signal.SIGKILL)
                    self.popen.wait(timeout=30)
            # Anything the leader forked and left in its group goes too. A member in the middle of a
            # system call dies only when it returns: containerd's shims and runc, tearing down mounts
            # and cgroups on a loaded machine, took more than 5 s (a CI run of 9add09e found
            # containerd's group alive at the session's end).
            if group_has_members(self.pgid):
                signal_group(self.pgid, signal.SIGKILL)
                if not wait_group_gone(self.pgid, GROUP_GONE_SECONDS):
                    log.warning("%s: group %d outlived SIGKILL for %.0fs", self.name, self.pgid, GROUP_GONE_SECONDS)
            return self.popen.returncode

    def kill(self) -> int | None:
        """SIGKILL the group at once, as a node losing the pod would; return the exit code."""
        with self._lock:
            if self.popen.returncode is None:
                signal_group(self.pgid, signal.SIGKILL)
                self.popen.wait(timeout=30)
            return self.popen.returncode
