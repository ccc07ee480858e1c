"""Knative Eventing v0.48.0, control and data plane, as host processes against the test bed's API server.

Six unmodified upstream binaries (built by the toolchain from ``knative.dev/eventing``) run as
plain processes: ``eventing-controller`` (Brokers' Triggers, Subscriptions, the sources),
``mt-broker-controller``, ``imc-controller`` and ``imc-dispatcher`` (the InMemoryChannel),
``mt-broker-ingress`` and ``mt-broker-filter`` (the MTChannelBasedBroker's data plane). Their
CRDs, config maps and RBAC come from the module's own ``config/`` folder, copied by the toolchain;
``config-features`` gets the repository's ``eventing/config-features-patch.yaml`` as a merge patch,
the way ``docs/deploy.md`` tells an operator to apply it.

What a cluster would provide, the test bed does, and says so:

- the Services ``broker-ingress``, ``broker-filter`` and ``imc-dispatcher`` are applied as shipped;
  their Endpoints, which only pods would fill, are written by hand with one TEST-NET address
  (192.0.2.10, never dialled: the API server refuses loopback endpoints) so the reconcilers'
  "endpoints available" checks pass;
- the ``imc-dispatcher`` Deployment exists (the imc-controller looks at it) and the kubelet
  stand-in (:mod:`testbed.standins.kubelet`) marks it Available because its process runs;
- names under ``.svc.cluster.local`` resolve through the service proxy
  (:mod:`testbed.standins.service_proxy`): every Knative process gets ``HTTP_PROXY`` pointing at it;
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
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.processes import (
    HttpProbe,
    LogProbe,
    ManagedProcess,
    Probe,
    ProcessError,
    ProcessSpec,
    Supervisor,
    free_port,
    port_is_free,
    run,
)
from testbed.standins.service_proxy import ServiceProxy
from testbed.toolchain import Toolchain

log = logging.getLogger(__name__)

SYSTEM_NAMESPACE = "knative-eventing"
DISPATCHER_PORTS = (8080, 8443)  # hard-coded in the in-memory channel dispatcher
PLACEHOLDER_ENDPOINT = "192.0.2.10"  # TEST-NET-1: never dialled, only makes Endpoints "available"
# Images as Knative's release files name them before `ko resolve`: the kubelet stand-in runs the
# toolchain's binary of the same package for them.
KO = "ko://knative.dev/eventing/cmd/"

# Data-plane processes: what a Broker restart restarts.
DATA_PLANE = ("imc-dispatcher", "mt-broker-ingress", "mt-broker-filter")


def host(service: str, namespace: str = SYSTEM_NAMESPACE) -> str:
    return f"{service}.{namespace}.svc.cluster.local"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _files(folder: Path, pattern: str = "*.yaml") -> list[Path]:
    found = sorted(folder.glob(pattern))
    if not found:
        raise ProcessError(f"no {pattern} in {folder}: the toolchain's copy of Knative's config/ is incomplete")
    return found


@dataclass(frozen=True)
class Ports:
    ingress: int
    ingress_tls: int
    filter: int
    filter_tls: int
    imc_webhook: int


@dataclass(frozen=True)
class KnativeProcess:
    """One upstream binary as a host process: its name, binary and the environment of its pod."""

    name: str
    binary: str
    env: Mapping[str, str]
    probe: Probe


class KnativeEventing:
    """The running Knative Eventing: its processes, its ports, and the Broker restart faults need."""

    def __init__(
        self,
        tools: Toolchain,
        kubeconfig: Path,
        supervisor: Supervisor,
        proxy: ServiceProxy,
        features_patch: Path,
    ) -> None:
        self.tools = tools
        self.kubeconfig = kubeconfig
        self.supervisor = supervisor
        self.proxy = proxy
        self.features_patch = features_patch
        self.ports = Ports(*(free_port() for _ in range(5)))
        self.processes: dict[str, ManagedProcess] = {}
        self._specs: dict[str, KnativeProcess] = {}

    # ------------------------------------------------------------------ kubectl
    def kubectl(self, *args: str, input: str | None = None) -> str:
        return run([self.tools.kubectl, f"--kubeconfig={self.kubeconfig}", *args], input=input, timeout=180).stdout

    def apply(self, docs: Sequence[Mapping[str, Any]], *, server_side: bool = False) -> None:
        args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
        self.kubectl(*args, input=yaml.safe_dump_all(list(docs)))

    # ------------------------------------------------------------------ install
    def install(self) -> None:
        """CRDs, config maps, Knative's RBAC, and the Services/Endpoints/Deployment a cluster holds."""
        config = self.tools.knative_config / "eventing"
        core, imc = config / "core", config / "channels" / "in-memory-channel"
        self.apply(_docs(core / "100-namespace.yaml"))
        crds = [doc for path in _files(core / "resources") for doc in _docs(path)]
        crds += _docs(imc / "resources" / "in-memory-channel.yaml")
        crds += [
            doc
            for path in _files(self.tools.knative_config / "serving-crds")
            for doc in _docs(path)
            if doc.get("kind") == "CustomResourceDefinition"
        ]
        self.apply([_without_conversion_webhook(crd) for crd in crds], server_side=True)
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")

        configmaps = [doc for path in _files(core / "configmaps") for doc in _docs(path)]
        configmaps += _docs(imc / "configmaps" / "event-dispatcher.yaml")
        configmaps += _docs(imc / "webhooks" / "secret.yaml")  # the imc webhook's certificate Secret (unused)
        self.apply(configmaps)
        self.kubectl(
            "patch",
            "configmap",
            "config-features",
            "-n",
            SYSTEM_NAMESPACE,
            "--type=merge",
            f"--patch-file={self.features_patch}",
        )

        # Knative's own identities and roles: the adapters the kubelet stand-in runs use them.
        rbac = [doc for path in _files(core, "200-*.yaml") for doc in _docs(path)]
        rbac += [doc for path in _files(core / "roles") for doc in _docs(path)]
        self.apply(rbac)

        services = [
            d
            for d in _docs(config / "brokers/mt-channel-broker/deployments/broker-ingress.yaml")
            if d["kind"] == "Service"
        ]
        services += [
            d
            for d in _docs(config / "brokers/mt-channel-broker/deployments/broker-filter.yaml")
            if d["kind"] == "Service"
        ]
        services += _docs(imc / "deployments" / "dispatcher-service.yaml")
        endpoints = [_placeholder_endpoints(service) for service in services]
        dispatcher = next(d for d in _docs(imc / "deployments" / "dispatcher.yaml") if d["kind"] == "Deployment")
        pingsource = next(
            d for d in _docs(core / "deployments" / "pingsource-mt-adapter.yaml") if d["kind"] == "Deployment"
        )
        self.apply([*services, *endpoints, dispatcher, pingsource])

    # ------------------------------------------------------------------ processes
    def _process_table(self) -> list[KnativeProcess]:
        ports = self.ports
        image = KO.__add__
        return [
            KnativeProcess(
                "imc-dispatcher",
                "in_memory_channel_dispatcher",
                {
                    "CONTAINER_NAME": "dispatcher",
                    "METRICS_DOMAIN": "knative.dev/inmemorychannel-dispatcher",
                    "MAX_IDLE_CONNS": "1000",
                    "MAX_IDLE_CONNS_PER_HOST": "1000",
                },
                _health(DISPATCHER_PORTS[0]),
            ),
            KnativeProcess(
                "eventing-controller",
                "controller",
                {
                    "METRICS_DOMAIN": "knative.dev/eventing",
                    "APISERVER_RA_IMAGE": image("apiserver_receive_adapter"),
                    "AUTH_PROXY_IMAGE": image("auth_proxy"),
                },
                LogProbe.matching("Starting controllers"),
            ),
            KnativeProcess(
                "mt-broker-controller",
                "mtchannel_broker",
                {"METRICS_DOMAIN": "knative.dev/eventing"},
                LogProbe.matching("Starting controllers"),
            ),
            KnativeProcess(
                "imc-controller",
                "in_memory_channel_controller",
                {
                    "METRICS_DOMAIN": "knative.dev/inmemorychannel-controller",
                    "WEBHOOK_NAME": "inmemorychannel-webhook",
                    "WEBHOOK_PORT": str(ports.imc_webhook),
                    "DISPATCHER_IMAGE": image("in_memory/channel_dispatcher"),
                },
                LogProbe.matching("Starting controllers"),
            ),
            KnativeProcess(
                "mt-broker-ingress",
                "broker_ingress",
                {
                    "CONTAINER_NAME": "ingress",
                    "NAMESPACE": SYSTEM_NAMESPACE,
                    "METRICS_DOMAIN": "knative.dev/internal/eventing",
                    "INGRESS_PORT": str(ports.ingress),
                    "INGRESS_PORT_HTTPS": str(ports.ingress_tls),
                },
                _health(ports.ingress),
            ),
            KnativeProcess(
                "mt-broker-filter",
                "broker_filter",
                {
                    "CONTAINER_NAME": "filter",
                    "NAMESPACE": SYSTEM_NAMESPACE,
                    "METRICS_DOMAIN": "knative.dev/internal/eventing",
                    "FILTER_PORT": str(ports.filter),
                    "FILTER_PORT_HTTPS": str(ports.filter_tls),
                },
                _health(ports.filter),
            ),
        ]

    def pod_environment(self) -> dict[str, str]:
        """What every Knative pod gets: its namespace, config map names, the cluster's DNS (the proxy)."""
        proxy = self.proxy.url
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "SYSTEM_NAMESPACE": SYSTEM_NAMESPACE,
            "CONFIG_LOGGING_NAME": "config-logging",
            "CONFIG_OBSERVABILITY_NAME": "config-observability",
            "HTTP_PROXY": proxy,
            "http_proxy": proxy,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

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
        for spec in self._process_table():
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

    # ------------------------------------------------------------------ addresses
    def ingress_url(self, namespace: str, broker: str) -> str:
        """The Broker's ingress on its local port (what the Broker's cluster address leads to)."""
        return f"http://127.0.0.1:{self.ports.ingress}/{namespace}/{broker}"

    def wait_ready(self, namespace: str, kind: str, name: str, timeout: float = 120) -> dict[str, Any]:
        """Wait for condition Ready of a Knative object; return it. The error shows its conditions."""
        deadline = time.monotonic() + timeout
        while True:
            found = json.loads(
                self.kubectl("get", kind, name, "-n", namespace, "-o", "json", "--ignore-not-found") or "{}"
            )
            conditions = {c["type"]: c for c in found.get("status", {}).get("conditions", [])}
            if conditions.get("Ready", {}).get("status") == "True":
                return dict(found)
            if time.monotonic() > deadline:
                shown = [
                    f"{c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}"
                    for c in conditions.values()
                ]
                raise ProcessError(f"{kind} {namespace}/{name} not Ready after {timeout:.0f}s: {shown or 'no status'}")
            time.sleep(0.2)


def _health(port: int) -> HttpProbe:
    # Knative's receivers answer a kubelet's probe (its User-Agent) on any path.
    return HttpProbe(
        f"http://127.0.0.1:{port}/healthz", headers={"User-Agent": "kube-probe/1.34"}, ok_statuses=frozenset({200, 204})
    )


def _without_conversion_webhook(crd: dict[str, Any]) -> dict[str, Any]:
    """Knative's multi-version CRDs convert through Knative's webhook, which does not run here: the
    API server would retry the missing webhook every second for each served version. Versions are
    converted by name only (strategy None); nothing here reads a version other than the stored one."""
    if (crd.get("spec", {}).get("conversion") or {}).get("strategy") == "Webhook":
        crd = {**crd, "spec": {**crd["spec"], "conversion": {"strategy": "None"}}}
    return crd


def _placeholder_endpoints(service: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": service["metadata"]["name"], "namespace": service["metadata"]["namespace"]},
        "subsets": [
            {
                "addresses": [{"ip": PLACEHOLDER_ENDPOINT}],
                "ports": [
                    {"name": p["name"], "port": int(p["targetPort"]), "protocol": "TCP"}
                    for p in service["spec"]["ports"]
                ],
            }
        ],
    }


@contextlib.contextmanager
def start_eventing(
    tools: Toolchain, kubeconfig: Path, supervisor: Supervisor, proxy: ServiceProxy, features_patch: Path
) -> Iterator[KnativeEventing]:
    """Install and start Knative Eventing; stop its processes when the block ends."""
    eventing = KnativeEventing(tools, kubeconfig, supervisor, proxy, features_patch)
    eventing.install()
    try:
        eventing.start()
        yield eventing
    finally:
        eventing.stop()
