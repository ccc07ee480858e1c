"""kube-controller-manager for the test bed: the controllers that finish what the API server starts.

The API server alone accepts a namespace deletion and marks the namespace ``Terminating``, but
removing its content and its ``kubernetes`` finalizer is the namespace controller's job; and
objects whose owner is gone are removed only by the garbage collector. :func:`start_controller_manager`
runs the real kube-controller-manager (built by :mod:`testbed.toolchain`) with just those
two controllers (:data:`CONTROLLERS`):

- it authenticates with a client certificate of its own, user ``system:kube-controller-manager``
  in ``system:masters`` (one identity for all controllers, no per-controller ServiceAccounts), so
  its requests are told apart from the tests' in the audit log;
- ``--leader-elect=false`` (one instance, no Lease to wait for);
- it serves ``/healthz`` on a free 127.0.0.1 port with a serving certificate from the test bed's
  CA, and counts as ready when ``/healthz`` answers 200 and its log says each controller started.

Nothing else runs: no ServiceAccount controller (no ``default`` ServiceAccount appears), no token
Secrets, no Deployments or pods. :func:`testbed.controlplane.startup.start_control_plane` calls this
once kube-apiserver is ready.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.controlplane import pki
from testbed.processes import HttpProbe, ManagedProcess, ProcessSpec, Supervisor, free_port

USER = "system:kube-controller-manager"
GROUPS: tuple[str, ...] = ("system:masters",)
# Aliases kube-controller-manager v1.34 accepts for namespace-controller and
# garbage-collector-controller (its log uses the canonical names).
CONTROLLERS: tuple[str, ...] = ("namespace", "garbagecollector")
_CANONICAL = {"namespace": "namespace-controller", "garbagecollector": "garbage-collector-controller"}


@dataclass(frozen=True)
class ControllersStarted:
    """Ready when ``/healthz`` answers and the log says every named controller started."""

    healthz: HttpProbe
    controllers: tuple[str, ...]

    def ready(self, process: ManagedProcess) -> bool:
        text = process.log_text()
        started = all(
            re.search(rf'"Started controller".*controller="{re.escape(name)}"', text) for name in self.controllers
        )
        return started and self.healthz.ready(process)

    def describe(self) -> str:
        return f"{self.healthz.describe()} and log lines 'Started controller' for {', '.join(self.controllers)}"


def start_controller_manager(
    binary: Path,
    kubeconfig: Path,
    ca: pki.CertificateAuthority,
    workdir: Path,
    *,
    supervisor: Supervisor,
    ready_timeout: float = 120.0,
    controllers: Sequence[str] = CONTROLLERS,
    extra_args: Sequence[str] = (),
) -> ManagedProcess:
    """Start kube-controller-manager talking through ``kubeconfig``; wait until it is ready.

    ``kubeconfig`` should authenticate as :data:`USER` in :data:`GROUPS`; ``ca`` signs the
    ``/healthz`` serving certificate. The process belongs to ``supervisor`` (log
    ``kube-controller-manager.log``); the caller stops it. ``controllers`` may use the flag's
    ``*`` and ``-name`` forms (the node of :mod:`testbed.node` runs them all); only the names
    given plainly are waited for in the log. ``extra_args`` are appended to the command line.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    serving = ca.issue_serving(["localhost"], ["127.0.0.1"])
    cert_file = pki.write_private(workdir / "serving.crt", serving.cert_pem)
    key_file = pki.write_private(workdir / "serving.key", serving.key_pem)
    ca_file = pki.write_private(workdir / "ca.crt", ca.cert_pem)
    port = free_port()
    probe = ControllersStarted(
        healthz=HttpProbe(f"https://127.0.0.1:{port}/healthz", ca_file=ca_file),
        controllers=tuple(_CANONICAL.get(name, name) for name in controllers if name != "*" and name[:1] != "-"),
    )
    return supervisor.start(
        ProcessSpec(
            name="kube-controller-manager",
            argv=(
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--controllers={','.join(controllers)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={cert_file}",
                f"--tls-private-key-file={key_file}",
                "--profiling=false",
                # The GC and namespace controllers act on every resource; the default client rate
                # (20 QPS) would make a namespace with many objects linger for seconds.
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                *extra_args,
            ),
        ),
        probe,
        ready_timeout=ready_timeout,
    )
