"""The whole pipeline on one machine, on Knative's own broker: what ``kubeopera-tenants local``, the
end-to-end tests and the benchmarks run.

``start_stack`` brings up, in order, and stops in reverse on exit, error or Ctrl-C:

1. the embedded control plane (etcd, kube-apiserver, kube-controller-manager) and the OCI registry
   with the stand-in vcluster chart pushed;
2. the service proxy, the stand-in for cluster DNS and kube-proxy (``*.svc.cluster.local`` → the
   local port that serves it), and Knative Eventing v0.48.0: its controllers and its broker's data
   plane (ingress, filter, in-memory channel), upstream binaries as host processes
   (:mod:`testbed.knative.eventing`), with ``eventing/config-features-patch.yaml`` applied;
3. the kubelet stand-in, which runs the Deployments Knative's controllers make for the sources
   (the ApiServerSource's adapter, the PingSource's ``mtping``) as host processes, with exactly
   the environment and ServiceAccount the controller wrote into them;
4. ``deploy/crd``, then ``deploy/base`` as kustomize builds it (RBAC, admission policies, the
   Knative Services, and all of ``eventing/``: Broker, Triggers, ApiServerSource, PingSource,
   SinkBinding), unchanged, after ``tools/knative-check`` did what Knative's webhook would do
   (``SetDefaults`` then ``Validate``);
5. the kubeopera-api stand-in, unless ``kubeopera_api_url`` is given;
6. each function under gunicorn with the container image's own command and a token of its own
   ServiceAccount, and the Knative Serving stand-in, which marks each Knative Service Ready at its
   cluster address and routes that address to the function's port; Knative Eventing then resolves
   the Triggers' subscribers by itself. tenant-resync gets ``K_SINK`` = the Broker's address, what
   the SinkBinding would inject (its reconciler lives in Knative's webhook, which does not run here);
7. the vCluster stand-in;
8. one resync tick at start (:meth:`Stack.tick`), so a Tenant created while nothing ran is picked
   up; the PingSource's own schedule (every 5 minutes) is run by the real ``mtping``.

Everything runs on 127.0.0.1; logs go to ``<run_dir>/logs``. Only one stack can run per network
namespace: Knative's channel dispatcher takes the fixed ports 8080 and 8443.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import requests
import yaml

from testbed import controlplane as cp_mod
from testbed.knative.adapter import AdapterConfig, AdapterReadyProbe
from testbed.knative.broker_watch import BrokerWatch, Route
from testbed.knative.eventing import KO, KnativeEventing, start_eventing
from testbed.knative.eventing import host as knative_host
from testbed.local.ticker import ping_event
from testbed.processes import (
    HttpProbe,
    LogProbe,
    ManagedProcess,
    ProcessSpec,
    Supervisor,
    free_port,
    run,
    wait_ready,
)
from testbed.registry import helm_env, push_chart, start_registry
from testbed.standins import serving as serving_standin
from testbed.standins.kubelet import Image, KubeletStandIn
from testbed.standins.kubeopera_api import ApiStandIn
from testbed.standins.service_proxy import ServiceProxy
from testbed.toolchain import Toolchain, ensure_all, knative_check

TENANT_NAMESPACE = "kubeopera-system"
BROKER = "default"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = Path(__file__).resolve().parents[1] / "chart"

# Knative Service name -> Python module in functions/ (the Services in deploy/base/services).
FUNCTIONS: Mapping[str, str] = {
    "tenant-install": "install",
    "tenant-check-ready": "check_ready",
    "tenant-store-kubeconfig": "store_kubeconfig",
    "tenant-notify-api": "notify_api",
    "tenant-dead-letter": "dead_letter",
    "tenant-cleanup": "cleanup",
    "tenant-resync": "resync",
}
SOURCE = "tenant-source"  # the ApiServerSource in eventing/, and its ServiceAccount
ADAPTER_DEPLOYMENT_PREFIX = f"apiserversource-{SOURCE}-"


class StackError(RuntimeError):
    """The local pipeline could not start; the message says which part and why."""


@dataclass(frozen=True)
class StackOptions:
    kubeopera_api_url: str | None = None
    api_token: str = field(default="", repr=False)
    vcluster_boot_seconds: float = 20.0
    vcluster_never_boot: str = ""  # releases matching this regular expression never boot
    ready_poll_seconds: int = 15
    cleanup_poll_seconds: int = 5
    resync_at_start: bool = True  # one tick once everything is up (the PingSource's schedule is every 5 min)
    stuck_release_seconds: int = 180
    provision_timeout_seconds: int = 600
    run_dir: Path | None = None
    log_level: str = "INFO"


@dataclass(frozen=True)
class Stack:
    """What is running, and where."""

    admin_kubeconfig: Path
    run_dir: Path
    watch: BrokerWatch  # what the broker delivered to the functions, read off the wire
    eventing: KnativeEventing
    kubelet: KubeletStandIn
    proxy: ServiceProxy
    broker_address: str  # the Broker's status.address.url (a cluster name, through the proxy)
    api: ApiStandIn | None
    api_url: str
    function_urls: Mapping[str, str]
    function_kubeconfigs: Mapping[str, Path]
    chart_ref: str
    tools: Toolchain
    supervisor: Supervisor
    control_plane: cp_mod.ControlPlane
    function_specs: Mapping[str, ProcessSpec] = field(default_factory=dict)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """kubectl as admin; raises ``ProcessError`` with kubectl's stderr if it fails."""
        return kubectl(self.tools, self.admin_kubeconfig, *args, input=input)

    def log_dir(self) -> Path:
        return self.supervisor.log_dir

    @property
    def ingress_url(self) -> str:
        """The Broker's ingress on its local port."""
        return self.eventing.ingress_url(TENANT_NAMESPACE, BROKER)

    def tick(self) -> None:
        """Send the resync PingSource's event to the Broker now, as its schedule would."""
        headers, body = ping_event(project_path("eventing", "resync-pingsource.yaml"))
        session = requests.Session()
        session.trust_env = False
        session.post(self.ingress_url, headers=headers, data=body, timeout=10).raise_for_status()

    def adapter(self) -> tuple[str, ManagedProcess]:
        """The ApiServerSource's Deployment (made by Knative's controller) and its running process."""
        return self.kubelet.wait_pod(TENANT_NAMESPACE, ADAPTER_DEPLOYMENT_PREFIX)

    def stop_adapter(self) -> None:
        """Take the ApiServerSource's pod away and keep it away (its Deployment stays)."""
        deployment, _ = self.adapter()
        self.kubelet.hold(TENANT_NAMESPACE, deployment)

    def start_adapter(self) -> ManagedProcess:
        """Let the ApiServerSource's pod run again; returns once its watch is established."""
        deployment = next(
            name for ns, name in (key.split("/", 1) for key in self.kubelet.held()) if ns == TENANT_NAMESPACE
        )
        return self.kubelet.release(TENANT_NAMESPACE, deployment)

    def restart_broker(self) -> None:
        """Restart the broker's data plane (ingress, filter, channel dispatcher): what is in flight is lost."""
        killed_at = time.time()
        self.eventing.restart_data_plane()
        self.watch.data_plane_restarted(killed_at)

    def start_replica(self, service: str) -> tuple[ManagedProcess, str]:
        """One more process of a function, as another pod of its Knative Service would be (same
        environment and identity, its own port); returns it and its URL. The broker keeps
        delivering to the first one; tests post to this one directly."""
        spec = self.function_specs[service]
        port = free_port()
        env = dict(spec.env, PORT=str(port))
        replica = replace(spec, name=f"{service}-2", env=env)
        process = self.supervisor.start(replica, HttpProbe(f"http://127.0.0.1:{port}/readyz"), ready_timeout=120.0)
        return process, f"http://127.0.0.1:{port}/"


def kubectl(tools: Toolchain, kubeconfig: Path, *args: str, input: str | None = None) -> str:
    return run([str(tools.kubectl), f"--kubeconfig={kubeconfig}", *args], input=input, timeout=180).stdout


def project_path(*parts: str) -> Path:
    path = PROJECT_ROOT.joinpath(*parts)
    if not path.exists():
        raise StackError(f"{path} is missing: run from a clone of kubeopera-tenants (pip install -e .)")
    return path


def gunicorn_command(module: str) -> list[str]:
    """The container image's start command (Dockerfile ENTRYPOINT + the Service's args)."""
    gunicorn = Path(sys.executable).with_name("gunicorn")
    if not gunicorn.exists():
        found = shutil.which("gunicorn")
        if found is None:
            raise StackError("gunicorn is not installed next to this Python: pip install -e .")
        gunicorn = Path(found)
    return [str(gunicorn), "-c", "python:functions.gunicorn_conf", f"functions.{module}:create_app()"]


def admitted_manifests(tools: Toolchain, run_dir: Path) -> Path:
    """``deploy/base`` as kustomize builds it, each Knative object as Knative's webhook would store it
    (``tools/knative-check``: ``SetDefaults`` then ``Validate``, with the cluster's eventing feature
    flags and Broker defaults); written to a file under ``run_dir``, whose path is returned."""
    built = kubectl(tools, Path(os.devnull), "kustomize", str(project_path("deploy", "base")))
    emitted = run_dir / "deploy-base.checked.yaml"
    cluster_config = [
        tools.knative_config / "eventing" / "core" / "configmaps" / "default-broker.yaml",
        project_path("eventing", "config-features-patch.yaml"),
    ]
    checked = run([knative_check(), "--emit", emitted, *cluster_config, "-"], input=built, check=False)
    if checked.returncode != 0:
        raise StackError(f"Knative's validation refused deploy/base:\n{checked.stdout}{checked.stderr}")
    ours = [
        doc
        for doc in yaml.safe_load_all(emitted.read_text())
        if doc and doc["metadata"].get("namespace") != "knative-eventing"  # the cluster's config, given as input
    ]
    admitted = run_dir / "deploy-base.admitted.yaml"
    admitted.write_text(yaml.safe_dump_all(ours))
    return admitted


def routes(manifests: list[dict[str, Any]]) -> list[Route]:
    """Each Trigger of the Broker, with the delivery that applies to it."""
    broker = next(d for d in manifests if d["kind"] == "Broker" and d["metadata"]["name"] == BROKER)
    return [
        Route.from_trigger(doc, broker["spec"].get("delivery") or {})
        for doc in manifests
        if doc["kind"] == "Trigger" and doc["spec"]["broker"] == BROKER
    ]


@contextlib.contextmanager
def start_stack(options: StackOptions) -> Iterator[Stack]:
    tools = ensure_all()
    owns_run_dir = options.run_dir is None
    run_dir = Path(tempfile.mkdtemp(prefix="kubeopera-local-")) if options.run_dir is None else options.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with Supervisor(run_dir) as sup, contextlib.ExitStack() as stack:
            control_plane = stack.enter_context(cp_mod.start_control_plane(tools, run_dir, supervisor=sup))
            admin = control_plane.admin_kubeconfig
            registry = stack.enter_context(start_registry(tools, run_dir, supervisor=sup))
            chart_ref = push_chart(tools, registry.url, CHART_DIR, run_dir)

            proxy = stack.enter_context(ServiceProxy())
            eventing = stack.enter_context(
                start_eventing(tools, admin, sup, proxy, project_path("eventing", "config-features-patch.yaml"))
            )
            identities = _Identities(control_plane, run_dir / "identities")
            kubelet = KubeletStandIn(
                admin,
                sup,
                {
                    KO + "apiserver_receive_adapter": Image(
                        binary=tools.apiserver_adapter,
                        args=("-v=2",),  # client-go logs "Caches populated": the readiness check below
                        probe=lambda env: AdapterReadyProbe(AdapterConfig.from_environment(env)),
                    ),
                    KO + "mtping": Image(
                        binary=tools.knative / "mtping", probe=lambda env: LogProbe.matching("Started workers")
                    ),
                    KO + "in_memory/channel_dispatcher": Image(
                        running=lambda: (
                            "imc-dispatcher" in eventing.processes and eventing.processes["imc-dispatcher"].running()
                        )
                    ),
                },
                identities.kubeconfig,
                {k: v for k, v in eventing.pod_environment().items() if k != "KUBECONFIG"},
            )
            kubelet.start()
            stack.callback(kubelet.stop)

            kubectl(tools, admin, "apply", "-f", str(project_path("deploy", "crd")))
            kubectl(tools, admin, "wait", "--for=condition=Established", "--timeout=60s", "crd/tenants.kubeopera.io")
            admitted = admitted_manifests(tools, run_dir)
            manifests = [doc for doc in yaml.safe_load_all(admitted.read_text()) if doc]
            kubectl(tools, admin, "apply", "-f", str(admitted))
            # The Broker's address, known before it is Ready: its delivery's dead-letter sink is a
            # function, so the Broker becomes Ready only once the functions are served.
            broker_address = f"http://{knative_host('broker-ingress')}/{TENANT_NAMESPACE}/{BROKER}"

            kubeconfigs = {name: identities.kubeconfig(TENANT_NAMESPACE, name) for name in [*FUNCTIONS, SOURCE]}
            api: ApiStandIn | None = None
            api_url = options.kubeopera_api_url or ""
            if not api_url:
                api = stack.enter_context(ApiStandIn())
                api_url = api.url

            urls: dict[str, str] = {}
            ports: dict[str, int] = {}
            specs: dict[str, ProcessSpec] = {}
            for service, module in FUNCTIONS.items():
                ports[service] = port = free_port()
                env = _function_env(options, tools, run_dir, service, chart_ref, api_url, port, kubeconfigs[service])
                env.update(_cluster_network(proxy))
                env["K_SINK"] = broker_address  # what the SinkBinding in eventing/ injects into tenant-resync
                specs[service] = ProcessSpec(name=service, argv=tuple(gunicorn_command(module)), env=env, cwd=run_dir)
                urls[service] = f"http://127.0.0.1:{port}/"
            # All at once, as a Knative Service's pods start: they import the same modules side by side.
            started = {service: sup.start(spec) for service, spec in specs.items()}
            for service, process in started.items():
                wait_ready(process, HttpProbe(f"{urls[service]}readyz"), timeout=120.0)
            serving_standin.publish(admin, proxy, TENANT_NAMESPACE, ports)
            broker = eventing.wait_ready(TENANT_NAMESPACE, "broker", BROKER)
            if broker["status"]["address"]["url"] != broker_address:
                raise StackError(f"the Broker's address is {broker['status']['address']['url']}, not {broker_address}")
            for doc in manifests:
                if doc["kind"] in ("Trigger", "ApiServerSource", "PingSource"):
                    eventing.wait_ready(TENANT_NAMESPACE, doc["kind"].lower(), doc["metadata"]["name"])

            sup.start(
                ProcessSpec(
                    name="vcluster-standin",
                    argv=(
                        sys.executable,
                        "-m",
                        "testbed.standins.vcluster",
                        "--kubeconfig",
                        str(admin),
                        "--boot-seconds",
                        str(options.vcluster_boot_seconds),
                        "--never-boot",
                        options.vcluster_never_boot,
                    ),
                )
            )
            result = Stack(
                admin_kubeconfig=admin,
                run_dir=run_dir,
                watch=BrokerWatch(proxy, TENANT_NAMESPACE, routes(manifests)),
                eventing=eventing,
                kubelet=kubelet,
                proxy=proxy,
                broker_address=broker_address,
                api=api,
                api_url=api_url,
                function_urls=urls,
                function_kubeconfigs=kubeconfigs,
                chart_ref=chart_ref,
                tools=tools,
                supervisor=sup,
                control_plane=control_plane,
                function_specs=specs,
            )
            result.adapter()  # its watch is established: from now on every Tenant change is sent
            if options.resync_at_start:
                result.tick()
            yield result
    finally:
        if owns_run_dir and not os.environ.get("KUBEOPERA_KEEP_RUN_DIR"):
            shutil.rmtree(run_dir, ignore_errors=True)


def _cluster_network(proxy: ServiceProxy) -> dict[str, str]:
    """A pod's view of the cluster network: Service names through the proxy, loopback direct."""
    return {
        "HTTP_PROXY": proxy.url,
        "http_proxy": proxy.url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


class _Identities:
    """A kubeconfig per ServiceAccount, with a token from the TokenRequest API (a pod's projected token)."""

    def __init__(self, control_plane: cp_mod.ControlPlane, folder: Path) -> None:
        self._cp = control_plane
        self._folder = folder
        self._made: dict[tuple[str, str], Path] = {}

    def kubeconfig(self, namespace: str, account: str) -> Path:
        if (namespace, account) not in self._made:
            self._folder.mkdir(parents=True, exist_ok=True)
            token = cp_mod.request_token(self._cp, namespace, account, duration="24h")
            self._made[(namespace, account)] = cp_mod.kubeconfig_for_token(
                self._cp,
                token,
                self._folder / f"{namespace}.{account}.kubeconfig",
                user=f"system:serviceaccount:{namespace}:{account}",
            )
        return self._made[(namespace, account)]


def _function_env(
    options: StackOptions,
    tools: Toolchain,
    run_dir: Path,
    service: str,
    chart_ref: str,
    api_url: str,
    port: int,
    kubeconfig: Path,
) -> dict[str, str]:
    env = helm_env(run_dir / "helm" / service)
    env.update(
        {
            "PORT": str(port),
            "KUBECONFIG": str(kubeconfig),
            "VCLUSTER_CHART": chart_ref,
            "VCLUSTER_CHART_VERSION": "0.21.2",
            "HELM_EXECUTABLE": str(tools.helm),
            "CHART_CACHE_DIR": str(run_dir / "charts" / service),
            "KUBEOPERA_API_BASE_URL": api_url,
            "INTERNAL_SERVICE_TOKEN": options.api_token,
            "ENVIRONMENT": "local",
            "READY_POLL_SECONDS": str(options.ready_poll_seconds),
            "CLEANUP_POLL_SECONDS": str(options.cleanup_poll_seconds),
            "STUCK_RELEASE_SECONDS": str(options.stuck_release_seconds),
            "PROVISION_TIMEOUT_SECONDS": str(options.provision_timeout_seconds),
            "LOG_LEVEL": options.log_level,
            "GUNICORN_THREADS": "4",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env
