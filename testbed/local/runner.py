"""``kubeopera-tenants local``: the whole pipeline on this machine, and a live view of it.

Starts everything ``testbed.local.stack`` describes, optionally writes the admin kubeconfig,
creates the example Tenant (``alice-default``, as in the original operator's documentation) and
prints, as they happen, each phase change with its time and each delivery Knative's broker makes
to a function (read off the wire by the test bed's service proxy: what the broker's filter sent
and what the function answered). At
Ready it says how long it took, where the kubeconfig Secret is and what kubeopera-api received.
It keeps watching every Tenant until Ctrl-C (or SIGTERM), then stops all it started and removes
its temporary folder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from shared.adapters.kube import Kube
from shared.errors import TenantError
from shared.model.tenant import Phase, Tenant
from testbed.jaeger import Jaeger, TraceSpan, start_jaeger
from testbed.knative.broker_watch import Delivery
from testbed.live import EXAMPLE, LiveView
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, project_path, start_stack
from testbed.local.waterfall import render
from testbed.processes import Supervisor
from testbed.project import export_kubeconfig
from testbed.toolchain import ensure_all

NEW_TENANT_HINT = """\
Create more Tenants (tenantName: 3-32 lowercase letters, digits, '-'):
  kubectl apply -f - <<'EOF'
  apiVersion: kubeopera.io/v1alpha1
  kind: Tenant
  metadata: {name: bob-dev, namespace: kubeopera-system}
  spec:
    userID: 5b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6f
    tenantName: bob-dev
    cloudSpaceID: 0c8f9d2e-1a3b-4c5d-8e7f-6a5b4c3d2e1f
    quota: {cpu: "1", memory: 2Gi}
  EOF"""


@dataclass(frozen=True)
class LocalOptions:
    kubeconfig_out: Path | None = None
    kubeopera_api_url: str | None = None
    create_example: bool = True
    vcluster_boot_seconds: float = 20.0
    trace: bool = False  # start Jaeger, trace the functions into it, print each Ready Tenant's trace
    sender_identity: bool = True  # Knative's authentication-oidc: the broker sends tokens, functions check them


@dataclass
class _Watch:
    """The live view, and what only this tier shows once: the broker's deliveries, Ready announced."""

    view: LiveView
    deliveries_seen: int = 0
    announced: set[str] = field(default_factory=set)


def run(options: LocalOptions, out: TextIO = sys.stdout) -> int:
    if threading.current_thread() is threading.main_thread():
        # A shell starts background jobs with SIGINT ignored; Ctrl-C must always stop us.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # The live view below is the output; library logs only when something is wrong.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for quiet in ("werkzeug", "testbed.standins.kubelet"):
        logging.getLogger(quiet).setLevel(logging.ERROR)
    print("kubeopera-tenants local: starting the pipeline (a cold first run builds the tools)...", file=out, flush=True)
    stack_options = StackOptions(
        kubeopera_api_url=options.kubeopera_api_url,
        api_token=os.environ.get("INTERNAL_SERVICE_TOKEN", ""),
        vcluster_boot_seconds=options.vcluster_boot_seconds,
        sender_identity=options.sender_identity,
        resync_schedule=True,  # as on a cluster: the PingSource's tick every 5 minutes
    )
    try:
        with contextlib.ExitStack() as running:
            jaeger = running.enter_context(_receiver()) if options.trace else None
            if jaeger is not None:
                stack_options = replace(stack_options, function_env=tracing_env(jaeger))
            stack = running.enter_context(start_stack(stack_options))
            _serve(stack, options, out, jaeger)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C; SIGTERM/SIGHUP arrive as SystemExit
        pass
    except TenantError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("stopped; everything it started is gone.", file=out, flush=True)
    return 0


@contextlib.contextmanager
def _receiver() -> Iterator[Jaeger]:
    """Jaeger, for ``--trace``, in a folder of its own that goes with it."""
    folder = Path(tempfile.mkdtemp(prefix="kubeopera-trace-"))
    try:
        with Supervisor(folder / "logs") as supervisor, start_jaeger(ensure_all(), supervisor, folder) as jaeger:
            yield jaeger
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def tracing_env(jaeger: Jaeger) -> dict[str, str]:
    """What turns tracing on in every function: the standard variables only."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}


def tenant_trace(jaeger: Jaeger, tenant_key: str) -> tuple[str, list[TraceSpan]] | None:
    """The trace of a Tenant's provisioning (its id and spans): the one holding notify-api's
    delivery for it."""
    for trace_id in jaeger.trace_ids("tenant-notify-api"):
        spans = jaeger.trace(trace_id)
        if any(s.service == "tenant-notify-api" and s.attributes.get("kubeopera.tenant") == tenant_key for s in spans):
            return trace_id, spans
    return None


def _serve(stack: Stack, options: LocalOptions, out: TextIO, jaeger: Jaeger | None = None) -> None:
    watch = _Watch(LiveView(out))
    kubeconfig = export_kubeconfig(stack.admin_kubeconfig, options.kubeconfig_out)
    watch.view.say(
        "ready: control plane, registry, Knative Eventing and its broker, the functions and the "
        "ApiServerSource adapter are up",
    )
    print(
        f"\nUse kubectl against it:\n  export KUBECONFIG={kubeconfig}\n  kubectl get kt -n {TENANT_NAMESPACE}\n"
        f"  kubeopera-tenants status --kubeconfig {kubeconfig}\n"
        f"Callbacks go to {stack.api_url}; logs are in {stack.log_dir()}\n"
        + (f"Traces go to Jaeger: {jaeger.query_url}/api/traces?service=tenant-install\n" if jaeger else ""),
        file=out,
        flush=True,
    )
    kube = Kube.connect(stack.admin_kubeconfig)
    try:
        if options.create_example:
            stack.kubectl("apply", "-f", str(project_path(*EXAMPLE)))
            watch.view.say("created Tenant kubeopera-system/alice-default")
        print(NEW_TENANT_HINT + "\nCtrl-C stops everything.\n", file=out, flush=True)
        while True:
            _poll(stack, kube, watch, out, jaeger)
            time.sleep(0.5)
    finally:
        kube.close()


def _poll(stack: Stack, kube: Kube, watch: _Watch, out: TextIO, jaeger: Jaeger | None) -> None:
    deliveries = stack.watch.deliveries()
    for delivery in deliveries[watch.deliveries_seen :]:
        watch.view.say(describe(delivery))
    watch.deliveries_seen = len(deliveries)
    for tenant in watch.view.tenants(kube, TENANT_NAMESPACE):
        if tenant.status.phase == Phase.READY and tenant.name not in watch.announced:
            watch.announced.add(tenant.name)
            _announce(stack, tenant, watch.view.since_first_seen(tenant), out)
            if jaeger is not None:
                _show_trace(jaeger, tenant, out)


def describe(delivery: Delivery) -> str:
    """One line for a delivery: whose, to which function, what came back."""
    subject = (delivery.subject or delivery.type).rsplit("/", 1)[-1]
    step = delivery.service.removeprefix("tenant-")
    if delivery.target == "dead-letter":
        return (
            f"{subject}: dead-lettered from {delivery.trigger.removeprefix('tenant-')} to {step} -> {delivery.status}"
        )
    answer = f"{delivery.status}"
    if delivery.reply_type:
        answer += f", replied {delivery.reply_type}"
    if delivery.outcome == "retrying":
        answer += f", the broker retries in {delivery.retry_after}s" if delivery.retry_after else ", the broker retries"
    return f"{subject}: {step} <- {delivery.type}: {answer}"


def _announce(stack: Stack, tenant: Tenant, took: float, out: TextIO) -> None:
    names = tenant.spec.names
    lines = [
        f"\n{tenant.name} is Ready (about {took:.0f}s after it was first seen).",
        f"  vCluster: helm release {names.release} in namespace {names.namespace}",
        f"  kubeconfig: Secret {TENANT_NAMESPACE}/{names.kubeconfig_secret}, key kubeconfig:",
        f"    kubectl get secret {names.kubeconfig_secret} -n {TENANT_NAMESPACE} "
        "-o jsonpath='{.data.kubeconfig}' | base64 -d",
    ]
    if stack.api is not None:
        for request in stack.api.requests():
            if names.cloud_space_id in request.path:
                lines.append(f"  kubeopera-api stand-in received: {request.method} {request.path} {request.body}")
    print("\n".join(lines) + "\n", file=out, flush=True)


def _show_trace(jaeger: Jaeger, tenant: Tenant, out: TextIO) -> None:
    """The Tenant's trace as a waterfall, and how to query it (spans arrive a moment after Ready)."""
    deadline = time.monotonic() + 10
    found = tenant_trace(jaeger, tenant.key)
    while found is None and time.monotonic() < deadline:
        time.sleep(0.5)
        found = tenant_trace(jaeger, tenant.key)
    if found is None:
        print(f"  (no trace of {tenant.name} in Jaeger yet: {jaeger.query_url})\n", file=out, flush=True)
        return
    trace_id, spans = found
    shown = [s for s in spans if not s.name.startswith("k8s ")]
    deliveries = sum(1 for s in spans if "cloudevents.event_type" in s.attributes)
    lines = [
        f"{tenant.name}'s trace {trace_id}: {deliveries} deliveries, {len(spans)} spans "
        f"({len(spans) - len(shown)} Kubernetes calls not shown)",
        *render(shown),
        f"Every span, as JSON: curl -s {jaeger.query_url}/api/traces/{trace_id}",
    ]
    print("\n".join(lines) + "\n", file=out, flush=True)
