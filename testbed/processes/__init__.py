"""A small process supervisor for the test bed: start, wait until ready, log to files, tear down.

Every long-running part of the test bed (etcd, kube-apiserver, the registry, the Knative adapter)
runs as a child process started through a :class:`Supervisor`:

- each child gets its own process group (so a terminal's Ctrl-C does not hit it half-way, and
  stopping it also stops anything it forked) and its own log file under ``<run dir>/logs``;
- :meth:`Supervisor.start` waits for a readiness probe (HTTP, with TLS options, or a log line)
  and, when the child dies or never becomes ready, stops it and raises :class:`NotReadyError`
  whose message ends with the tail of the child's log;
- leaving the ``with Supervisor(...)`` block - normally, on an exception or on Ctrl-C - stops the
  children in reverse start order: SIGTERM to the group, SIGKILL after a grace period;
- an ``atexit`` hook stops whatever is still running when the interpreter exits, and SIGTERM /
  SIGHUP (when nobody else handles them) raise :class:`Terminated` (a KeyboardInterrupt) so the
  same clean-up runs.

Every process started in this interpreter is remembered: :func:`surviving_processes` lists
those that still have a live process in their group, which is how the tests prove that nothing
is left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Protocol

import requests
import urllib3

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 10.0
DEFAULT_READY_TIMEOUT = 60.0
LOG_TAIL_LINES = 60

# Ports the test bed never hands out: the Knative adapter's fixed health port, its profiling
# port and the usual metrics port.
RESERVED_PORTS = frozenset({8080, 8008, 9090})

_handed_out: set[int] = set()
_port_lock = threading.Lock()


class ProcessError(RuntimeError):
    """A test bed process could not be started or run a command successfully."""


class NotReadyError(ProcessError):
    """A process exited or timed out before it was ready; the message carries its log tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and was not handed out before in this process."""
    with _port_lock:
        for _ in range(200):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in RESERVED_PORTS and port not in _handed_out:
                _handed_out.add(port)
                return port
    raise ProcessError("could not find a free port on 127.0.0.1")


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (we can bind it ourselves)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return False
            raise
    return True


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


@dataclass(frozen=True)
class ProcessSpec:
    """What to run: argv, extra environment (added to ``os.environ``) and working folder."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    inherit_env: bool = True


class Probe(Protocol):
    """Readiness check, called repeatedly until it returns True."""

    def ready(self, process: ManagedProcess) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class HttpProbe:
    """Ready when ``GET url`` answers with a status in ``ok_statuses``.

    ``ca_file`` verifies the server; ``client_cert``/``client_key`` authenticate; ``insecure``
    skips verification (only for a server whose CA we do not have).
    """

    url: str
    ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    insecure: bool = False
    ok_statuses: frozenset[int] = frozenset({200})
    request_timeout: float = 2.0
    headers: Mapping[str, str] = field(default_factory=dict)

    def ready(self, process: ManagedProcess) -> bool:
        verify: bool | str = False if self.insecure else (str(self.ca_file) if self.ca_file else True)
        cert = (str(self.client_cert), str(self.client_key)) if self.client_cert and self.client_key else None
        try:
            with warnings_silenced(), requests.Session() as session:
                session.trust_env = False  # never through an HTTP(S)_PROXY: we probe loopback
                response = session.get(
                    self.url, headers=dict(self.headers), verify=verify, cert=cert, timeout=self.request_timeout
                )
        except requests.RequestException:
            return False
        return response.status_code in self.ok_statuses

    def describe(self) -> str:
        return f"GET {self.url} answering {sorted(self.ok_statuses)}"


@dataclass(frozen=True)
class LogProbe:
    """Ready when ``predicate(log text)`` is true (e.g. a line the program prints once ready)."""

    predicate: Callable[[str], bool]
    description: str

    @classmethod
    def matching(cls, pattern: str) -> LogProbe:
        """Ready once the log contains a match for the regular expression ``pattern``."""
        compiled = re.compile(pattern, re.MULTILINE)
        return cls(predicate=lambda text: compiled.search(text) is not None, description=f"log /{pattern}/")

    def ready(self, process: ManagedProcess) -> bool:
        return self.predicate(process.log_text())

    def describe(self) -> str:
        return self.description


@contextlib.contextmanager
def warnings_silenced() -> Iterator[None]:
    """Silence urllib3's InsecureRequestWarning for probes that skip verification."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        yield


class ManagedProcess:
    """One child process started by a :class:`Supervisor`, leader of its own process group."""

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
        return _group_has_members(self.pgid)

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
                _signal_group(self.pgid, signal.SIGTERM)
                try:
                    self.popen.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    log.warning("%s (pid %d) ignored SIGTERM for %.0fs; killing it", self.name, self.pid, grace)
                    _signal_group(self.pgid, signal.SIGKILL)
                    self.popen.wait(timeout=30)
            # Anything the leader forked and left in its group goes too.
            if _group_has_members(self.pgid):
                _signal_group(self.pgid, signal.SIGKILL)
            return self.popen.returncode


    def kill(self) -> int | None:
        """SIGKILL the group at once, as a node losing the pod would; return the exit code."""
        with self._lock:
            if self.popen.returncode is None:
                _signal_group(self.pgid, signal.SIGKILL)
                self.popen.wait(timeout=30)
            return self.popen.returncode


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_has_members(pgid: int) -> bool:
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


_all_processes: list[ManagedProcess] = []
_all_lock = threading.Lock()
_live_supervisors: set[Supervisor] = set()


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


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived. A KeyboardInterrupt, so that everything (pytest included)
    treats it like Ctrl-C: stop now, unwind, clean up. ``signum`` says which signal it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def install_signal_handlers() -> None:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` (so ``with`` blocks clean up).

    Only from the main thread, and only where the default action (die at once, skipping all
    clean-up) is in place. Ctrl-C already raises KeyboardInterrupt.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _raise_terminated)


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
        with _all_lock:
            _all_processes.append(process)
        with self._lock:
            self._processes.append(process)
        _live_supervisors.add(self)
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
        _live_supervisors.discard(self)


def wait_ready(process: ManagedProcess, probe: Probe, timeout: float) -> None:
    """Poll ``probe`` until it passes; raise NotReadyError if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        code = process.poll()
        if code is not None:
            raise NotReadyError(
                f"{process.name} exited with code {code} before it was ready ({probe.describe()}); "
                f"last lines of {process.log_path}:\n{process.log_tail()}"
            )
        if probe.ready(process):
            log.info("%s ready after %.1fs", process.name, time.monotonic() - process.started_at)
            return
        if time.monotonic() > deadline:
            raise NotReadyError(
                f"{process.name} was not ready after {timeout:.0f}s ({probe.describe()}); "
                f"last lines of {process.log_path}:\n{process.log_tail()}"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a short command (kubectl, helm) to completion; raise ProcessError with its stderr."""
    args = [os.fspath(a) for a in argv]
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        result = subprocess.run(args, env=full_env, input=input, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise ProcessError(f"`{' '.join(args)}` did not finish within {timeout:.0f}s") from err
    if check and result.returncode != 0:
        raise ProcessError(f"`{' '.join(args)}` failed (exit {result.returncode}):\n{result.stderr.strip()[-4000:]}")
    return result
