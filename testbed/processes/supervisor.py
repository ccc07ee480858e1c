""":class:`Supervisor`: starts child processes, each in its own process group with its own log
file under ``<run dir>/logs``, waits until they are ready, and stops them all on close.

Leaving the ``with Supervisor(...)`` block - normally, on an exception or on Ctrl-C - stops the
children in reverse start order (SIGTERM to the group, SIGKILL after a grace period). Entering it
installs the SIGTERM/SIGHUP handlers of :mod:`testbed.processes.signals`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType

from testbed.processes import tracking
from testbed.processes.errors import ProcessError
from testbed.processes.managed import DEFAULT_GRACE_SECONDS, ManagedProcess
from testbed.processes.probes import Probe, wait_ready
from testbed.processes.signals import install_signal_handlers
from testbed.processes.spec import ProcessSpec

log = logging.getLogger(__name__)

DEFAULT_READY_TIMEOUT = 60.0


class Supervisor:
    """Starts processes with logs under ``run_dir/logs`` and stops them all on close.

    Use as a context manager, or call :meth:`close` yourself (it is idempotent).
    """

    def __init__(self, run_dir: Path, *, grace: float = DEFAULT_GRACE_SECONDS) -> None:
        self.run_dir = Path(run_dir)
        self.log_dir = self.run_dir / "logs"
        self.grace = grace
        self._processes: list[ManagedProcess] = []
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> Supervisor:
        install_signal_handlers()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def processes(self) -> list[ManagedProcess]:
        """The processes this supervisor started, in start order."""
        with self._lock:
            return list(self._processes)

    def start(
        self,
        spec: ProcessSpec,
        probe: Probe | None = None,
        *,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
    ) -> ManagedProcess:
        """Start ``spec`` and wait for ``probe``; on failure stop it and raise NotReadyError."""
        if self._closed:
            raise ProcessError(f"supervisor for {self.run_dir} is closed; cannot start {spec.name}")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{spec.name}.log"
        env = dict(os.environ) if spec.inherit_env else {}
        env.update(spec.env)
        with open(log_path, "ab") as log_file:
            log_offset = log_file.tell()
            log_file.write(f"--- {time.strftime('%H:%M:%S')} starting: {' '.join(spec.argv)}\n".encode())
            log_file.flush()
            try:
                popen = subprocess.Popen(
                    list(spec.argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=spec.cwd,
                    start_new_session=True,
                )
            except OSError as err:
                raise ProcessError(f"could not start {spec.name} ({spec.argv[0]}): {err}") from err
        process = ManagedProcess(spec, popen, log_path, log_offset)
        tracking.record_process(process)
        with self._lock:
            self._processes.append(process)
        tracking.record_supervisor(self)
        log.info("started %s (pid %d), log %s", spec.name, process.pid, log_path)
        if probe is not None:
            try:
                wait_ready(process, probe, ready_timeout)
            except BaseException:
                self.stop(process)
                raise
        return process

    def stop(self, process: ManagedProcess) -> int | None:
        """Stop one process (idempotent)."""
        code = process.stop(self.grace)
        with self._lock:
            if process in self._processes:
                self._processes.remove(process)
        return code

    def close(self) -> None:
        """Stop every process this supervisor started, newest first."""
        self._closed = True
        for process in reversed(self.processes):
            try:
                self.stop(process)
            except Exception:  # keep stopping the others
                log.exception("could not stop %s (pid %d)", process.name, process.pid)
        tracking.forget_supervisor(self)
