"""The whole pipeline on one machine, on Knative's own broker: what ``kubeopera-tenants local``, the
end-to-end tests and the benchmarks run.

``start_stack`` brings up, in order, and stops in reverse on exit, error or Ctrl-C:

1. the embedded control plane (etcd, kube-apiserver, kube-controller-manager) and the OCI registry
   with the stand-in vcluster chart pushed;
2. the service proxy, the stand-in for cluster DNS and kube-proxy (``*.svc.cluster.local`` → the
   local port that serves it), and Knative Eventing v0.48.0: its controllers and its broker's data
   plane (ingress, filter, in-memory channel), upstream binaries as host processes
   (:mod:`testbed.knative.eventing`), with ``eventing/config-features-patch.yaml`` applied and
   ``authentication-oidc`` on (off with ``StackOptions(sender_identity=False)``): every hop of an
   event carries a token of its sender's identity (:mod:`testbed.knative.oidc`);
3. the kubelet stand-in, which runs the Deployments Knative's controllers make for the sources
   (the ApiServerSource's adapter, the PingSource's ``mtping``) as host processes, with exactly
   the environment and ServiceAccount the controller wrote into them (:mod:`.kubelet_images`);
4. ``deploy/crd``, then ``deploy/base`` as kustomize builds it (RBAC, admission policies, the
   Knative Services, and all of ``eventing/``: Broker, Triggers, ApiServerSource, PingSource,
   SinkBinding), unchanged, after ``tools/knative-check`` did what Knative's webhook would do
   (``SetDefaults`` then ``Validate``) (:mod:`.manifests`), with an audience for every Trigger's
   subscriber and dead-letter sink that has none (:mod:`.senders`);
5. the kubeopera-api stand-in, unless ``kubeopera_api_url`` is given;
6. each function of a Knative Service in ``deploy/base`` under gunicorn with the container image's
   own command and a token of its own ServiceAccount (:mod:`.function_processes`,
   :mod:`.identities`), told who may deliver to it (``SENDER_IDENTITY``, ``SENDER_AUDIENCE``,
   ``SENDER_SUBJECTS``: :mod:`.senders`), and the Knative Serving stand-in, which marks each
   Knative Service Ready at its cluster address and routes that address to the function's port;
   Knative Eventing then resolves the Triggers' subscribers by itself. tenant-resync gets
   ``K_SINK`` = the Broker's address and, with sender identity, ``SINK_TOKEN_FILE``, what the
   SinkBinding would give it (its reconciler lives in Knative's webhook, which does not run here;
   :func:`.senders.bind_sink_identity` publishes its identity); once the Triggers are Ready, their
   published identities and audiences are checked against what the functions were told;
7. the vCluster stand-in;
8. unless ``StackOptions.resync_schedule``, the PingSource's adapter (the real ``mtping``) held,
   so its wall-clock schedule (every 5 minutes) never fires at a moment no caller chose: tests and
   benchmarks send resync's tick themselves (:meth:`Stack.tick`); ``kubeopera-tenants local`` runs
   the schedule, as a cluster does;
9. one resync tick at start (:meth:`Stack.tick`), so a Tenant created while nothing ran is picked
   up, answered (the broker idle) before the stack is handed over.

Everything runs on 127.0.0.1; logs go to ``<run_dir>/logs``. Only one stack can run per network
namespace: Knative's channel dispatcher takes the fixed ports 8080 and 8443.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from testbed import controlplane as cp_mod
from testbed.knative import oidc
from testbed.knative.broker_watch import BrokerWatch, Delivery
from testbed.knative.eventing import KnativeEventing, host, start_eventing
from testbed.knative.kubectl import kubectl
from testbed.local import senders
from testbed.local.errors import StackError
from testbed.local.function_processes import function_specs, port_of, start_functions, start_replica, url_of
from testbed.local.identities import Identities
from testbed.local.kubelet_images import kubelet_images
from testbed.local.manifests import BROKER, SOURCE, admitted_manifests, routes
from testbed.local.mounts import config_map_env
from testbed.local.options import StackOptions
from testbed.local.ticker import ping_event
from testbed.processes import HttpProbe, ManagedProcess, ProcessSpec, Supervisor, free_port, until_conditions_exist
from testbed.project import CHART_DIR, TENANT_NAMESPACE, function_modules, project_path
from testbed.registry import push_chart, start_registry
from testbed.standins import serving as serving_standin
from testbed.standins.kubelet import KubeletStandIn
from testbed.standins.kubeopera_api import ApiStandIn
from testbed.standins.service_proxy import ServiceProxy
from testbed.standins.vcluster import Faults
from testbed.standins.vcluster import process_spec as vcluster_process
from testbed.toolchain import Toolchain, ensure_all

__all__ = ["TENANT_NAMESPACE", "Stack", "StackError", "StackOptions", "project_path", "routes", "start_stack"]

# The PingSource's shared adapter (Knative's mtping), which runs every PingSource's schedule.
PING_ADAPTER = ("knative-eventing", "pingsource-mt-adapter")
# The resync Trigger retries a failed tick after 10, 20 and 40 s (eventing/triggers): a pass, and
# what it re-drives, is answered within these.
RESYNC_SECONDS = 150.0

log = logging.getLogger(__name__)


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
    functions: Mapping[str, str]  # Knative Service name -> its module in functions/, from deploy/base
    function_urls: Mapping[str, str]
    function_kubeconfigs: Mapping[str, Path]
    chart_ref: str
    tools: Toolchain
    supervisor: Supervisor
    control_plane: cp_mod.ControlPlane
    function_specs: Mapping[str, ProcessSpec] = field(default_factory=dict)
    # Who may deliver to each function; SENDER_IDENTITY=off everywhere without authentication-oidc.
    sender_plan: senders.Plan | None = None

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """kubectl as admin; raises ``ProcessError`` with kubectl's stderr if it fails."""
        return kubectl(self.tools, self.admin_kubeconfig, *args, input=input)

    def log_dir(self) -> Path:
        return self.supervisor.log_dir

    @property
    def ingress_url(self) -> str:
        """The Broker's ingress on its local port."""
        return self.eventing.ingress_url(TENANT_NAMESPACE, BROKER)

    @property
    def sender_identity(self) -> bool:
        """Knative Eventing's authentication-oidc is on: the Broker admits only senders with a token."""
        return self.eventing.oidc_enabled

    def sender_authorization(self, service_account: str) -> dict[str, str]:
        """The ``Authorization`` header a sender with this identity (a ServiceAccount of the Tenant
        namespace) sends to the Broker: a token for the Broker's audience; ``{}`` without
        authentication-oidc. Whether the Broker admits it is its EventPolicy's say."""
        if not self.sender_identity:
            return {}
        audience = oidc.broker_audience(TENANT_NAMESPACE, BROKER)
        token = cp_mod.request_token(self.control_plane, TENANT_NAMESPACE, service_account, audiences=[audience])
        return {"Authorization": f"Bearer {token}"}

    def delivery_authorization(self, service: str) -> dict[str, str]:
        """The ``Authorization`` header the broker's filter sends to a function: a token of a Trigger
        identity allowed to deliver to it (its first ``SENDER_SUBJECTS``), for its ``SENDER_AUDIENCE``;
        ``{}`` without sender identity. For posting to a function directly, as the broker would."""
        env = (self.sender_plan.env if self.sender_plan else {}).get(service, {})
        if env.get("SENDER_IDENTITY") != "oidc":
            return {}
        namespace, account = env["SENDER_SUBJECTS"].split(",")[0].removeprefix("system:serviceaccount:").split(":")
        token = cp_mod.request_token(self.control_plane, namespace, account, audiences=[env["SENDER_AUDIENCE"]])
        return {"Authorization": f"Bearer {token}"}

    def source_identity(self, kind: str, name: str) -> str:
        """The OIDC identity Knative published for a source or Trigger (``status.auth``)."""
        found = self.kubectl(
            "get", kind, name, "-n", TENANT_NAMESPACE, "-o", "jsonpath={.status.auth.serviceAccountName}"
        )
        if not found:
            raise StackError(f"{kind} {name} publishes no OIDC identity (status.auth)")
        return found

    def tick(self, extra_headers: Mapping[str, str] | None = None) -> str:
        """Send the resync PingSource's event to the Broker now, as its schedule would (with the
        PingSource's identity, as ``mtping`` sends it), with ``extra_headers`` (a ``traceparent``);
        returns the event's id."""
        path = project_path("eventing", "resync-pingsource.yaml")
        headers, body = ping_event(path)
        pingsource = yaml.safe_load(path.read_text())["metadata"]["name"]
        self.send_as("pingsource", pingsource, headers | dict(extra_headers or {}), body)
        return headers["ce-id"]

    def send_as(self, kind: str, name: str, headers: Mapping[str, str], body: bytes) -> None:
        """Post one event (binary mode) to the Broker's ingress as the source ``kind``/``name``
        sends it: with its OIDC identity's token when sender identity is on."""
        authorization = self.sender_authorization(self.source_identity(kind, name)) if self.sender_identity else {}
        session = requests.Session()
        session.trust_env = False
        session.post(self.ingress_url, headers={**headers, **authorization}, data=body, timeout=10).raise_for_status()

    def resync(self, timeout: float = RESYNC_SECONDS, settle: bool = True) -> Delivery:
        """One resync pass now, waited for: send a tick and wait until resync answered it with
        success; with ``settle``, also until the broker is idle again (what the pass re-drove is
        answered too: not for a Tenant that polls on and on). Its delivery."""
        event_id = self.tick()
        delivery = self.watch.answered(event_id, timeout)
        if delivery is None or delivery.target == "dead-letter":
            raise StackError(f"resync did not answer tick {event_id} with success within {timeout:.0f}s: {delivery}")
        if settle and not self.watch.wait_idle(timeout):
            raise StackError(f"the broker is not idle {timeout:.0f}s after resync's pass: {self.watch.pending()}")
        return delivery

    def adapter(self, source: str = SOURCE) -> tuple[str, ManagedProcess]:
        """An ApiServerSource's Deployment (made by Knative's controller) and its running process."""
        return self.kubelet.wait_pod(TENANT_NAMESPACE, f"apiserversource-{source}")

    def stop_adapter(self, source: str = SOURCE) -> None:
        """Take an ApiServerSource's pod away and keep it away (its Deployment stays)."""
        deployment, _ = self.adapter(source)
        self.kubelet.hold(TENANT_NAMESPACE, deployment)

    def start_adapter(self, source: str = SOURCE) -> ManagedProcess:
        """Let an ApiServerSource's pod run again; returns once its watch is established."""
        prefix = f"{TENANT_NAMESPACE}/apiserversource-{source}"
        held = next(key for key in self.kubelet.held() if key.startswith(prefix))
        return self.kubelet.release(TENANT_NAMESPACE, held.split("/", 1)[1])

    def hold_resync_schedule(self) -> None:
        """Take the PingSource's adapter (``mtping``) away and keep it away: from now on resync runs
        only on :meth:`tick`. A tick ``mtping`` was sending as it stopped is on the wire or lost."""
        self.kubelet.hold(*PING_ADAPTER)

    def resync_schedule_held(self) -> bool:
        return "/".join(PING_ADAPTER) in self.kubelet.held()

    def restart_broker(self) -> None:
        """Restart the broker's data plane (ingress, filter, channel dispatcher): what is in flight is lost."""
        killed_at = time.time()
        self.eventing.restart_data_plane()
        self.watch.data_plane_restarted(killed_at)

    def restart_function(self, service: str, env: Mapping[str, str]) -> ManagedProcess:
        """A function's process stopped and started again, on its port, with ``env`` over its
        environment: what editing the ConfigMap and rolling the Service does (docs/deploy.md,
        "Change a setting"). Returns once it answers ``/readyz``; a later restart starts from the
        first environment again."""
        spec = self.function_specs[service]
        self.stop_function(service)
        again = ProcessSpec(spec.name, spec.argv, dict(spec.env) | dict(env), spec.cwd, spec.inherit_env)
        return self.supervisor.start(again, HttpProbe(f"{url_of(spec)}readyz"), ready_timeout=120.0)

    def stop_function(self, service: str) -> None:
        """A function's process stopped and kept stopped (its pods gone) until :meth:`start_function`."""
        for process in self.supervisor.processes:
            if process.spec.name == service:
                self.supervisor.stop(process)

    def start_function(self, service: str) -> ManagedProcess:
        """A function stopped by :meth:`stop_function` started again as it first was; returns once
        it answers ``/readyz`` (the vCluster watch: once its first LIST is in)."""
        return self.restart_function(service, {})

    def start_replica(
        self, service: str, env: Mapping[str, str] | None = None, name: str | None = None
    ) -> tuple[ManagedProcess, str]:
        """One more process of a function, as another pod of its Knative Service would be (same
        environment, with ``env`` over it, and the same identity, its own port); returns it and its
        URL. The broker keeps delivering to the first one; tests post to this one directly."""
        return start_replica(self.supervisor, self.function_specs[service], name or f"{service}-2", env)


@contextlib.contextmanager
def start_stack(options: StackOptions) -> Iterator[Stack]:
    tools = ensure_all()
    owns_run_dir = options.run_dir is None
    run_dir = Path(tempfile.mkdtemp(prefix="kubeopera-local-")) if options.run_dir is None else options.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with Supervisor(run_dir) as sup, contextlib.ExitStack() as stack:
            control_plane = stack.enter_context(
                cp_mod.start_control_plane(tools, run_dir, supervisor=sup, extra_apiserver_args=options.apiserver_args)
            )
            admin = control_plane.admin_kubeconfig
            registry = stack.enter_context(start_registry(tools, run_dir, supervisor=sup))
            chart_ref = push_chart(tools, registry.url, CHART_DIR, run_dir)

            proxy = stack.enter_context(ServiceProxy(tools.service_proxy))
            issuer = oidc.Issuer(control_plane.url, control_plane.ca_file) if options.sender_identity else None
            eventing = stack.enter_context(
                start_eventing(tools, admin, sup, proxy, project_path("eventing", "config-features-patch.yaml"), issuer)
            )
            identities = Identities(control_plane, run_dir / "identities")
            kubelet = KubeletStandIn(
                admin,
                sup,
                kubelet_images(tools, eventing),
                identities.kubeconfig,
                {k: v for k, v in eventing.pod_environment().items() if k != "KUBECONFIG"},
            )
            kubelet.start()
            stack.callback(kubelet.stop)

            kubectl(tools, admin, "apply", "-f", str(project_path("deploy", "crd")))
            until_conditions_exist(
                lambda: kubectl(
                    tools, admin, "wait", "--for=condition=Established", "--timeout=60s", "crd/tenants.kubeopera.io"
                )
            )
            admitted = admitted_manifests(tools, run_dir, eventing.features(), options.sender_identity)
            manifests = [doc for doc in yaml.safe_load_all(admitted.read_text()) if doc]
            functions = function_modules(manifests)
            sender_plan = senders.plan(manifests, TENANT_NAMESPACE, BROKER, functions, options.sender_identity)
            senders.check_declared(manifests, sender_plan)
            # The test bed applies what a cluster would, at once; a policy that could never be Ready
            # there is the product's bug, reported rather than worked around.
            if stuck := [doc["metadata"]["name"] for doc in manifests if senders.waits_for_triggers(doc)]:
                raise StackError(
                    f"EventPolicies {stuck} admit Triggers by ref: applied with them the Broker is never Ready "
                    "(testbed.local.senders.waits_for_triggers); name the Triggers' identities by sub"
                )
            kubectl(tools, admin, "apply", "-f", "-", input=yaml.safe_dump_all(manifests))
            # The Broker's address, known before it is Ready: its delivery's dead-letter sink is a
            # function, so the Broker becomes Ready only once the functions are served.
            broker_address = f"http://{host('broker-ingress')}/{TENANT_NAMESPACE}/{BROKER}"

            kubeconfigs = {name: identities.kubeconfig(TENANT_NAMESPACE, name) for name in [*functions, SOURCE]}
            api: ApiStandIn | None = None
            api_url = options.kubeopera_api_url or ""
            if not api_url:
                api = stack.enter_context(ApiStandIn())
                api_url = api.url

            broker_audience = oidc.broker_audience(TENANT_NAMESPACE, BROKER) if options.sender_identity else None
            sink_tokens: dict[str, Path] = {}  # each SinkBinding's token for the Broker (sender identity)
            if broker_audience is not None:
                for subject, binding in _sink_bindings(manifests, functions).items():
                    sink_tokens[subject] = senders.bind_sink_identity(
                        tools, control_plane, binding, broker_audience, run_dir / "identities"
                    )
            specs = function_specs(
                options,
                tools,
                run_dir,
                functions,
                kubeconfigs,
                chart_ref,
                api_url,
                proxy,
                broker_address,
                sender_plan.env,
                sink_tokens,
                config_map_env(manifests, functions, run_dir),
            )
            start_functions(sup, specs)
            serving_standin.publish(
                admin, proxy, TENANT_NAMESPACE, {service: port_of(spec) for service, spec in specs.items()}
            )
            broker = eventing.wait_ready(TENANT_NAMESPACE, "broker", BROKER)
            if broker["status"]["address"]["url"] != broker_address:
                raise StackError(f"the Broker's address is {broker['status']['address']['url']}, not {broker_address}")
            if (published := broker["status"]["address"].get("audience")) != broker_audience:
                raise StackError(f"the Broker's audience is {published}, not {broker_audience}")
            triggers = {}
            for doc in manifests:
                if doc["kind"] in ("Trigger", "ApiServerSource", "PingSource"):
                    ready = eventing.wait_ready(TENANT_NAMESPACE, doc["kind"].lower(), doc["metadata"]["name"])
                    if doc["kind"] == "Trigger":
                        triggers[doc["metadata"]["name"]] = ready
            senders.check_published(triggers, sender_plan)
            for doc in manifests:
                if doc["kind"] == "EventPolicy":
                    eventing.wait_ready(TENANT_NAMESPACE, "eventpolicy", doc["metadata"]["name"])

            vcluster_api_port = free_port()
            sup.start(_vcluster_standin(admin, options, vcluster_api_port))
            for suffix in (".svc", ".svc.cluster.local"):  # what cluster DNS and kube-proxy would do for HTTPS
                proxy.tunnels.add_suffix(suffix, vcluster_api_port)
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
                functions=functions,
                function_urls={service: url_of(spec) for service, spec in specs.items()},
                function_kubeconfigs=kubeconfigs,
                chart_ref=chart_ref,
                tools=tools,
                supervisor=sup,
                control_plane=control_plane,
                function_specs=specs,
                sender_plan=sender_plan,
            )
            result.adapter()  # its watch is established: from now on every Tenant change is sent
            if not options.resync_schedule:
                result.hold_resync_schedule()
            if options.resync_at_start:
                # Handed over only once that tick and all it caused are answered: a caller's first
                # Tenant is never listed by a tick it did not send.
                result.resync()
            yield result
    finally:
        if owns_run_dir and not os.environ.get("KUBEOPERA_KEEP_RUN_DIR"):
            shutil.rmtree(run_dir, ignore_errors=True)


def _sink_bindings(manifests: list[dict[str, Any]], functions: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Knative Service -> the SinkBinding that binds it to our Broker."""
    found = {}
    for doc in manifests:
        if doc["kind"] != "SinkBinding":
            continue
        subject, sink = doc["spec"]["subject"], (doc["spec"].get("sink") or {}).get("ref") or {}
        if subject.get("kind") == "Service" and subject.get("name") in functions and sink.get("name") == BROKER:
            found[subject["name"]] = doc
    return found


def _vcluster_standin(admin: Path, options: StackOptions, api_port: int) -> ProcessSpec:
    """The vCluster stand-in (:mod:`testbed.standins.vcluster`) as a process, its vClusters' API on ``api_port``."""
    faults = Faults(options.vcluster_never_boot, options.vcluster_api_down, options.vcluster_short_names)
    return vcluster_process(admin, options.vcluster_boot_seconds, faults, api_port=api_port)
