"""The cluster tier: the whole pipeline with every function a real Knative Service on a real node.

``start_cluster`` brings up, in order, and takes down in reverse (the machine as it was after):

1. the images (:mod:`testbed.images`): Knative's, Traefik, CoreDNS, pause, and the function image
   built from the project's own wheel in the Dockerfile's layout;
2. the node (:mod:`testbed.node`): control plane, containerd, kubelet, kube-scheduler, kube-proxy,
   with the images imported;
3. in one install, their pods starting side by side: CoreDNS, Knative Serving v0.48.0 from its
   release configuration (controller, webhook, activator, autoscaler) with Traefik as its
   ingress, and Knative Eventing v0.48.0 from its release configuration (controller, webhook,
   the in-memory channel, the multi-tenant broker, the PingSource adapter), all of them pods
   (:mod:`testbed.cluster.release`);
4. the stand-ins, on the node address so pods reach them: the OCI registry with the stand-in
   chart (over HTTPS with a certificate of the cluster's CA: helm speaks plain HTTP only to
   localhost), the kubeopera-api stand-in, and the vCluster stand-in (a host process watching the
   API server, as the vCluster pod would, and serving each vCluster's API behind its Service);
5. ``deploy/crd`` and ``deploy/base`` with ``eventing/``, changed only where a stand-in or the
   local image must be named (:func:`testbed.cluster.release.project_manifests`), and waits until
   every Knative Service, the Broker, every Trigger and both sources (the ApiServerSource, the
   PingSource) are Ready.

The node has 2 cores. Knative's own pods (and Traefik's and CoreDNS's) request about 1.2 CPU in
all, sized for a real cluster, which would leave the functions' pods unschedulable during a burst:
the test bed lowers each of their CPU requests to :data:`SYSTEM_CPU_REQUEST` (limits unchanged).
The functions keep the requests of ``deploy/``.

Knative's autoscaler windows are shortened (``ClusterOptions.autoscaler``; its webhook refuses a
stable window under 6 s) so that scaling to zero takes seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import requests
import yaml

from shared.model.naming import DEFAULT_TENANT_NAMESPACE
from testbed.cluster import podlogs, release
from testbed.controlplane import pki
from testbed.images import build_all
from testbed.knative.oidc import broker_audience
from testbed.local.ticker import ping_event
from testbed.node import NODE_IP, Node, start_node
from testbed.processes import ProcessError, free_port, until_conditions_exist
from testbed.project import CHART_DIR, project_path
from testbed.registry import Registry, RegistryTLS, push_chart, start_registry
from testbed.standins.kubeopera_api import ApiStandIn
from testbed.standins.vcluster import process_spec as vcluster_process
from testbed.toolchain import ClusterToolchain, cache_root, ensure_cluster

NAMESPACE = DEFAULT_TENANT_NAMESPACE
SERVING_NAMESPACE = "knative-serving"
EVENTING_NAMESPACE = "knative-eventing"
DEFAULT_AUTOSCALER: Mapping[str, str] = MappingProxyType({"stable-window": "20s", "scale-to-zero-grace-period": "10s"})


SYSTEM_CPU_REQUEST = "20m"


def small_requests(manifests: release.Manifests) -> release.Manifests:
    """The same objects, with each Deployment's containers requesting at most SYSTEM_CPU_REQUEST."""

    def lowered(doc: dict[str, Any]) -> dict[str, Any]:
        if doc.get("kind") != "Deployment":
            return doc
        doc = copy.deepcopy(doc)
        for container in doc["spec"]["template"]["spec"].get("containers", []):
            requests_ = container.setdefault("resources", {}).setdefault("requests", {})
            requests_["cpu"] = SYSTEM_CPU_REQUEST
        return doc

    return release.Manifests(crds=manifests.crds, objects=tuple(lowered(d) for d in manifests.objects))


@dataclass(frozen=True)
class ClusterOptions:
    run_dir: Path | None = None
    vcluster_boot_seconds: float = 3.0
    autoscaler: Mapping[str, str] = field(default_factory=lambda: DEFAULT_AUTOSCALER)
    # More settings of the functions (tenant-functions-config), e.g. READY_POLL_SECONDS.
    function_config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    images_dir: Path | None = None  # where built images are cached (default: the tools cache)


@dataclass(frozen=True)
class ClusterStack:
    """What is running on the node, and where."""

    node: Node
    tools: ClusterToolchain
    registry: Registry
    chart_ref: str
    api: ApiStandIn
    services: tuple[str, ...]  # the Knative Services of deploy/base
    functions: tuple[str, ...]  # those of them that scale with their events, from zero (all but the vCluster watch)
    run_dir: Path

    @property
    def admin_kubeconfig(self) -> Path:
        return self.node.kubeconfig

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120.0) -> str:
        return self.node.kubectl(*args, input=input, timeout=timeout)

    def get(self, *args: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json"))
        return found

    def pods(self, service: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        """The pods of a Knative Service's revisions that are not being deleted."""
        items = self.get("pods", "-n", namespace, "-l", f"serving.knative.dev/service={service}")["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def desired_scale(self, service: str, namespace: str = NAMESPACE) -> int:
        """What Knative's autoscaler wants for the Service's latest revision (its PodAutoscaler)."""
        pas = self.get("podautoscalers.autoscaling.internal.knative.dev", "-n", namespace,
                       "-l", f"serving.knative.dev/service={service}")["items"]  # fmt: skip
        return sum(int(pa.get("status", {}).get("desiredScale", 0) or 0) for pa in pas)

    def log_dir(self) -> Path:
        return self.node.dirs.logs

    @property
    def pod_logs(self) -> Path:
        """Where the functions' pods' logs are kept (:class:`~testbed.cluster.podlogs.PodLogs`)."""
        return self.run_dir / podlogs.FOLDER

    def cluster_ip(self, service: str, namespace: str) -> str:
        """A Service's ClusterIP: kube-proxy answers it from this machine as from a pod."""
        return str(self.get("service", service, "-n", namespace)["spec"]["clusterIP"])

    @property
    def broker_url(self) -> str:
        """The Broker's ingress, reachable from here (its ClusterIP; the path names the Broker)."""
        return f"http://{self.cluster_ip('broker-ingress', EVENTING_NAMESPACE)}/{NAMESPACE}/default"

    def sender_authorization(self, kind: str, name: str) -> dict[str, str]:
        """The ``Authorization`` header the source or Trigger ``kind``/``name`` sends to the Broker
        (authentication-oidc is on: the Broker admits only the senders its EventPolicy names): a
        token of the identity Knative published for it, for the Broker's audience."""
        account = self.kubectl("get", kind, name, "-n", NAMESPACE, "-o", "jsonpath={.status.auth.serviceAccountName}")
        if not account:
            raise RuntimeError(f"{kind} {name} publishes no OIDC identity (status.auth)")
        audience = broker_audience(NAMESPACE, "default")
        token = self.kubectl("create", "token", account, "-n", NAMESPACE, f"--audience={audience}").strip()
        return {"Authorization": f"Bearer {token}"}

    def tick(self) -> None:
        """Send the resync PingSource's event to the Broker now, as ``mtping`` sends it on the
        schedule (with the PingSource's identity): one resync pass, in a pod of tenant-resync."""
        headers, body = ping_event(project_path("eventing", "resync-pingsource.yaml"))
        headers |= self.sender_authorization("pingsource", "tenant-resync")
        session = requests.Session()
        session.trust_env = False
        session.post(self.broker_url, headers=headers, data=body, timeout=10).raise_for_status()

    @property
    def ingress_url(self) -> str:
        """Traefik's cluster-local entry point (what ``<ksvc>.<ns>.svc.cluster.local`` leads to)."""
        return f"http://{self.cluster_ip('traefik-internal', SERVING_NAMESPACE)}"


def _apply(node: Node, docs: Sequence[Mapping[str, Any]], *, server_side: bool = False) -> None:
    if not docs:
        return
    args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
    node.kubectl(*args, input=yaml.safe_dump_all(list(docs)), timeout=300)


def _install(node: Node, manifests: release.Manifests, namespaces: Sequence[str], timeout: int = 300) -> None:
    """CRDs, then (once Established) everything else, then every Deployment of ``namespaces`` Available."""
    _apply(node, manifests.crds, server_side=True)
    if manifests.crds:
        until_conditions_exist(
            lambda: node.kubectl(
                "wait", "--for=condition=Established", f"--timeout={timeout}s", "crd", "--all", timeout=timeout + 30
            ),
            timeout,
        )
    _apply_until_admitted(node, manifests.objects)
    for namespace in namespaces:
        node.kubectl("wait", "--for=condition=Available", f"--timeout={timeout}s", "deployment", "--all",
                     "-n", namespace, timeout=timeout + 30)  # fmt: skip


# kubectl's words when the API server refuses an object only for now: a webhook of a release
# just applied is not serving yet, or a kind whose CRD was just applied is not served yet.
NOT_ADMITTED_YET = ("failed calling webhook", "no endpoints available", "connection refused", "no matches for kind")


def _apply_until_admitted(node: Node, docs: Sequence[Mapping[str, Any]], timeout: float = 180.0) -> None:
    """Apply; again while the API server refuses something because a webhook it must call is
    not serving yet (Knative's webhooks are pods of the same release) or a kind is not served yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _apply(node, docs)
            return
        except ProcessError as err:
            transient = any(reason in str(err) for reason in NOT_ADMITTED_YET)
            if not transient or time.monotonic() > deadline:
                raise
            time.sleep(2)


def _wait_ready(node: Node, kind: str, namespace: str, timeout: int = 300) -> None:
    node.kubectl("wait", "--for=condition=Ready", f"--timeout={timeout}s", kind, "--all", "-n", namespace,
                 timeout=timeout + 30)  # fmt: skip


@contextlib.contextmanager
def start_cluster(options: ClusterOptions = ClusterOptions()) -> Iterator[ClusterStack]:
    tools = ensure_cluster()
    owns_run_dir = options.run_dir is None
    run_dir = Path(tempfile.mkdtemp(prefix="kubeopera-cluster-")) if options.run_dir is None else options.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        images = build_all(tools, options.images_dir or cache_root() / "images")
        with start_node(tools, run_dir / "node", images) as node, contextlib.ExitStack() as stack:
            yield _bring_up(tools, node, options, run_dir, stack)
    finally:
        if owns_run_dir and not os.environ.get("KUBEOPERA_KEEP_RUN_DIR"):
            shutil.rmtree(run_dir, ignore_errors=True)


def _bring_up(
    tools: ClusterToolchain, node: Node, options: ClusterOptions, run_dir: Path, stack: contextlib.ExitStack
) -> ClusterStack:
    # CoreDNS, Knative Serving with Traefik, and Knative Eventing do not need each other: one
    # install of all of them, their pods starting side by side (one after the other, 48 s of the
    # start-up idle; together, the time of the slowest, Eventing's).
    features = release.project_eventing_features(project_path())
    system = release.Manifests.together(
        release.Manifests(crds=(), objects=tuple(release.coredns_manifests())),
        release.serving_manifests(tools.knative_serving_config, options.autoscaler),
        release.Manifests(crds=(), objects=tuple(release.traefik_manifests())),
        release.eventing_manifests(tools.base.knative_config / "eventing", features),
    )
    _install(node, small_requests(system), ["kube-system", SERVING_NAMESPACE, EVENTING_NAMESPACE])

    registry, chart_ref = _registry(tools, node, run_dir, stack)
    api = stack.enter_context(ApiStandIn(host=NODE_IP))
    project = release.project_manifests(
        project_path(),
        tools.base.kubectl,
        chart_ref=chart_ref,
        api_address=(NODE_IP, api.port),
        registry_ca_pem=node.control_plane.ca_file.read_bytes(),
        function_config=options.function_config,
    )

    _install(node, project, [])
    ksvcs = [d for d in project.objects if d["kind"] == "Service" and d["apiVersion"].startswith("serving.knative.dev")]
    services = tuple(d["metadata"]["name"] for d in ksvcs)
    functions = tuple(d["metadata"]["name"] for d in ksvcs if _min_scale(d) == 0)
    for kind in ("ksvc", "broker", "trigger", "apiserversource", "pingsource"):
        _wait_ready(node, kind, NAMESPACE)

    # Its vClusters' API on the node address, and each release's Service pointed there by an
    # EndpointSlice: a function's pod reaches https://vc-<t>.vcluster-<t>.svc through real CoreDNS
    # and kube-proxy, as it would reach the real vCluster pod.
    node.supervisor.start(
        vcluster_process(
            node.kubeconfig, options.vcluster_boot_seconds, api_port=free_port(), api_host=NODE_IP, endpoints=True
        )
    )
    stack.enter_context(podlogs.PodLogs(node, NAMESPACE, services, run_dir / podlogs.FOLDER))
    return ClusterStack(
        node=node,
        tools=tools,
        registry=registry,
        chart_ref=chart_ref,
        api=api,
        services=services,
        functions=functions,
        run_dir=run_dir,
    )


def _min_scale(ksvc: dict[str, Any]) -> int:
    """The Knative Service's ``autoscaling.knative.dev/min-scale`` (0 when it sets none)."""
    annotations = ksvc["spec"]["template"].get("metadata", {}).get("annotations") or {}
    return int(annotations.get("autoscaling.knative.dev/min-scale", "0"))


def _registry(tools: ClusterToolchain, node: Node, run_dir: Path, stack: contextlib.ExitStack) -> tuple[Registry, str]:
    """The chart registry on the node address, over HTTPS with a certificate of the cluster's CA."""
    folder = run_dir / "registry"
    ca = node.control_plane.certificate_authority()
    serving = ca.issue_serving(["registry.local"], [NODE_IP])
    tls = RegistryTLS(
        cert_file=pki.write_private(folder / "tls" / "registry.crt", serving.cert_pem),
        key_file=pki.write_private(folder / "tls" / "registry.key", serving.key_pem),
        ca_file=node.control_plane.ca_file,
    )
    registry = stack.enter_context(
        start_registry(tools.base, folder, supervisor=node.supervisor, address=NODE_IP, tls=tls)
    )
    chart_ref = push_chart(tools.base, registry.url, CHART_DIR, folder, ca_file=tls.ca_file)
    return registry, chart_ref


__all__ = ["NAMESPACE", "ClusterOptions", "ClusterStack", "start_cluster"]
