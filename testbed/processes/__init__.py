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

The parts, one module each: :mod:`~testbed.processes.spec` (:class:`ProcessSpec`),
:mod:`~testbed.processes.managed` (:class:`ManagedProcess`, log tails),
:mod:`~testbed.processes.groups` (signalling process groups),
:mod:`~testbed.processes.probes` (readiness probes, :func:`wait_ready`),
:mod:`~testbed.processes.supervisor` (:class:`Supervisor`),
:mod:`~testbed.processes.tracking` (every process started here, the ``atexit`` clean-up),
:mod:`~testbed.processes.signals` (:class:`Terminated`), :mod:`~testbed.processes.ports`
(:func:`free_port`), :mod:`~testbed.processes.commands` (:func:`run`,
:func:`until_conditions_exist`) and
:mod:`~testbed.processes.errors`. This package re-exports what callers use.
"""

from __future__ import annotations

from testbed.processes.commands import run, until_conditions_exist
from testbed.processes.errors import NotReadyError, ProcessError
from testbed.processes.managed import DEFAULT_GRACE_SECONDS, LOG_TAIL_LINES, ManagedProcess, tail
from testbed.processes.ports import RESERVED_PORTS, free_port, port_is_free
from testbed.processes.probes import HttpProbe, LogProbe, Probe, wait_ready, warnings_silenced
from testbed.processes.signals import Terminated, install_signal_handlers
from testbed.processes.spec import ProcessSpec
from testbed.processes.supervisor import DEFAULT_READY_TIMEOUT, Supervisor
from testbed.processes.tracking import all_processes, stop_everything, surviving_processes

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "DEFAULT_READY_TIMEOUT",
    "LOG_TAIL_LINES",
    "RESERVED_PORTS",
    "HttpProbe",
    "LogProbe",
    "ManagedProcess",
    "NotReadyError",
    "Probe",
    "ProcessError",
    "ProcessSpec",
    "Supervisor",
    "Terminated",
    "all_processes",
    "free_port",
    "install_signal_handlers",
    "port_is_free",
    "run",
    "until_conditions_exist",
    "stop_everything",
    "surviving_processes",
    "tail",
    "wait_ready",
    "warnings_silenced",
]
