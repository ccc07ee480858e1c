"""Knative Eventing v0.48.0, control and data plane, as host processes against the test bed's API server.

Six unmodified upstream binaries (built by the toolchain from ``knative.dev/eventing``) run as
plain processes: ``eventing-controller`` (Brokers' Triggers, Subscriptions, the sources),
``mt-broker-controller``, ``imc-controller`` and ``imc-dispatcher`` (the InMemoryChannel),
``mt-broker-ingress`` and ``mt-broker-filter`` (the MTChannelBasedBroker's data plane). Their
CRDs, config maps and RBAC come from the module's own ``config/`` folder, copied by the toolchain;
``config-features`` gets the repository's ``eventing/config-features-patch.yaml`` as a merge patch,
the way ``docs/deploy.md`` tells an operator to apply it.

This module starts, restarts and stops them (:class:`KnativeEventing`, :func:`start_eventing`);
the parts live beside it: :mod:`.install` (the objects in the API server), :mod:`.process_table`
(each process's binary, environment and readiness), :mod:`.readiness` (waiting for a Knative
object's Ready), :mod:`.names` and :mod:`.kubectl`.

What a cluster would provide, the test bed does, and says so:

- the Services ``broker-ingress``, ``broker-filter`` and ``imc-dispatcher`` are applied as shipped;
  their Endpoints, which only pods would fill, are written by hand with one TEST-NET address
  (192.0.2.10, never dialled: the API server refuses loopback endpoints) so the reconcilers'
  "endpoints available" checks pass;
- the ``imc-dispatcher`` Deployment exists (the imc-controller looks at it) and the kubelet
  stand-in (:mod:`testbed.standins.kubelet`) marks it Available because its process runs;
- names under ``.svc.cluster.local`` resolve through the service proxy
  (:mod:`testbed.standins.service_proxy`): every Knative process gets ``HTTP_PROXY`` pointing at it;
- ``authentication-oidc`` (sender identity) is on when an :class:`~.oidc.Issuer` is given and off
  otherwise, whatever the repository's patch says; its token verification needs the issuer's
  discovery at the API server's loopback URL, its CA as ``SSL_CERT_FILE``, public discovery RBAC
  and the ingress's ``mt-broker-ingress-oidc`` ServiceAccount (:mod:`.oidc`);
- there is no admission webhook: what it would default is done by ``tools/knative-check`` before
  objects are applied (``SetDefaults`` then ``Validate``, as the webhook does), and the CRDs that
  convert versions through it convert by name instead (only the stored versions are used).

Pitfalls met on the way, each handled here:

- the dispatcher listens on ``:8080`` and ``:8443``, hard-coded, on every interface: it starts
  first, and a clear error names the ports when another process holds them (two stacks cannot
  share a network namespace; ``tools/isolated`` runs the tests in a private one);
- the other processes also try ``:8080`` for their health probes and only log the failure;
- ``NO_PROXY`` keeps the API server (127.0.0.1) off the proxy;
- the imc-controller's embedded webhook drains for 45 s on SIGTERM: it is killed at teardown.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.knative import oidc, readiness
from testbed.knative.install import install_eventing
from testbed.knative.names import KO, SYSTEM_NAMESPACE, host
from testbed.knative.oidc import Issuer
from testbed.knative.process_table import (
    DATA_PLANE,
    DISPATCHER_PORTS,
    KnativeProcess,
    Ports,
    pod_environment,
    process_table,
)
from testbed.processes import ManagedProcess, ProcessError, ProcessSpec, Supervisor, free_port, port_is_free
from testbed.standins.service_proxy import ServiceProxy
from testbed.toolchain import Toolchain

__all__ = ["KO", "SYSTEM_NAMESPACE", "KnativeEventing", "host", "start_eventing"]

log = logging.getLogger(__name__)


class KnativeEventing:
    """The running Knative Eventing: its processes, its ports, and the Broker restart faults need."""

    def __init__(
        self,
        tools: Toolchain,
        kubeconfig: Path,
        supervisor: Supervisor,
        proxy: ServiceProxy,
        features_patch: Path,
        issuer: Issuer | None = None,
    ) -> None:
        self.tools = tools
        self.kubeconfig = kubeconfig
        self.supervisor = supervisor
        self.proxy = proxy
        self.features_patch = features_patch
        self.issuer = issuer  # authentication-oidc on, tokens verified against it; None: off
        self.ports = Ports(*(free_port() for _ in range(5)))
        self.processes: dict[str, ManagedProcess] = {}
        self._specs: dict[str, KnativeProcess] = {}

    def install(self) -> None:
        """CRDs, config maps, Knative's RBAC, and the Services/Endpoints/Deployment a cluster holds;
        ``authentication-oidc`` set as :attr:`issuer` says, over the repository's patch."""
        install_eventing(self.tools, self.kubeconfig, self.features_patch, self.features())

    def features(self) -> dict[str, str]:
        """The config-features keys the test bed sets over the repository's patch."""
        return oidc.features(self.issuer)

    @property
    def oidc_enabled(self) -> bool:
        return self.issuer is not None

    def pod_environment(self) -> dict[str, str]:
        """What every Knative pod gets: its namespace, config map names, the cluster's DNS (the proxy)."""
        return pod_environment(self.kubeconfig, self.proxy.url, self.issuer.ca_file if self.issuer else None)

    # ------------------------------------------------------------------ processes
    def start(self) -> None:
        """Route the system Services through the proxy and start the six processes, dispatcher first."""
        taken = [port for port in DISPATCHER_PORTS if not port_is_free(port, "0.0.0.0")]
        if taken:
            raise ProcessError(
                f"port(s) {taken} are taken: Knative's in-memory channel dispatcher listens on :8080 and :8443 "
                "(hard-coded, every interface). Another local stack may be running; stop it, or run in a private "
                "network namespace (tools/isolated)."
            )
        self.proxy.routes.add(host("broker-ingress"), self.ports.ingress)
        self.proxy.routes.add(host("broker-filter"), self.ports.filter)
        # Channels are <channel>-kn-channel.<namespace>.svc.cluster.local; the dispatcher routes by Host.
        self.proxy.routes.add_suffix(".svc.cluster.local", DISPATCHER_PORTS[0])
        for spec in process_table(self.ports):
            self._specs[spec.name] = spec
            self._start(spec.name)

    def _start(self, name: str) -> ManagedProcess:
        spec = self._specs[name]
        env = {**self.pod_environment(), **spec.env, "POD_NAME": f"{name}-0", "PROFILING_PORT": str(free_port())}
        started = time.monotonic()
        process = self.supervisor.start(
            ProcessSpec(name=name, argv=(str(self.tools.knative / spec.binary),), env=env), spec.probe, ready_timeout=90
        )
        log.info("%s ready in %.1fs", name, time.monotonic() - started)
        self.processes[name] = process
        return process

    def restart_data_plane(self) -> None:
        """Kill the ingress, filter and dispatcher (the Broker's pods lost, e.g. with their node) and start
        them again. What they held in memory (events in flight, retries waiting) is lost, as in a cluster."""
        for name in reversed(DATA_PLANE):
            process = self.processes.pop(name)
            process.kill()
            self.supervisor.stop(process)
        for name in DATA_PLANE:
            self._start(name)

    def stop(self) -> None:
        """Newest first, while the API server still answers; the imc-controller is killed (45 s drain)."""
        for name in reversed(list(self.processes)):
            process = self.processes.pop(name)
            if name == "imc-controller":
                process.kill()
            self.supervisor.stop(process)

    # ------------------------------------------------------------------ addresses and readiness
    def ingress_url(self, namespace: str, broker: str) -> str:
        """The Broker's ingress on its local port (what the Broker's cluster address leads to)."""
        return f"http://127.0.0.1:{self.ports.ingress}/{namespace}/{broker}"

    def wait_ready(self, namespace: str, kind: str, name: str, timeout: float = 120) -> dict[str, Any]:
        """Wait for condition Ready of a Knative object; return it. The error shows its conditions."""
        return readiness.wait_ready(self.tools, self.kubeconfig, namespace, kind, name, timeout)


@contextlib.contextmanager
def start_eventing(
    tools: Toolchain,
    kubeconfig: Path,
    supervisor: Supervisor,
    proxy: ServiceProxy,
    features_patch: Path,
    issuer: Issuer | None = None,
) -> Iterator[KnativeEventing]:
    """Install and start Knative Eventing; stop its processes when the block ends. With ``issuer``,
    ``authentication-oidc`` is on (:mod:`.oidc`); without, it is off whatever the patch says."""
    eventing = KnativeEventing(tools, kubeconfig, supervisor, proxy, features_patch, issuer)
    eventing.install()
    try:
        eventing.start()
        yield eventing
    finally:
        eventing.stop()
