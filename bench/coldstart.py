"""What a function scaled to zero costs before it serves: process start to first event handled.

``python -m bench coldstart --runs 5`` starts the local stack (vCluster boot 0 s, poll 1 s),
provisions one Tenant, then for each function ``runs`` times starts one more process of it with
the exact command and environment its Knative Service runs (gunicorn, ``functions.gunicorn_conf``,
the same identity and chart cache) and, from the moment it is spawned, posts an event its
Trigger would deliver about that Tenant, with the token the broker would send, until one is
answered. That is what a scale-from-zero costs after Knative has started the container. It then
reads the worker's resident memory and stops the process.

It also times, with ``python -X importtime``, the import of each function's module and of each
dependency within it (the first import of each: cumulative microseconds), against a bare
``python -c pass``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence

import requests

from shared.adapters.kube import Kube
from shared.delivery import events
from shared.model import event_types
from shared.model.tenant import TenantRef
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, project_path, start_stack
from testbed.local.ticker import ping_event
from testbed.processes.ports import free_port
from testbed.processes.procfs import children, rss_mib

from .report import Table, spread, table
from .workload import provision

MODULES = {
    "tenant-router": "functions.router",
    "tenant-install": "functions.install",
    "tenant-check-ready": "functions.check_ready",
    "tenant-store-kubeconfig": "functions.store_kubeconfig",
    "tenant-notify-api": "functions.notify_api",
    "tenant-cleanup": "functions.cleanup",
    "tenant-dead-letter": "functions.dead_letter",
    "tenant-resync": "functions.resync",
}
DEPENDENCIES = (
    # the kubernetes client as the adapter loads it, a part at a time (not the package's own
    # __init__, which imported every model: 591 ms on 2026-12-01)
    "shared.adapters.kube.client",
    "flask",
    "werkzeug",
    "cloudevents.core",  # cloudevents and opentelemetry are namespace packages: their module that counts
    "pyhelm3",
    "requests",
    "urllib3",
    "prometheus_client",
    "opentelemetry.trace",
    "pythonjsonlogger",
    "tenacity",
    "yaml",
)
REF_TENANT = "coldstart"


def event_for(service: str, stack: Stack, obj: Mapping[str, object], ref: TenantRef) -> tuple[dict[str, str], bytes]:
    """An event the service's Trigger delivers, about the settled Tenant ``ref``."""
    if service == "tenant-router":
        headers = {
            "ce-specversion": "1.0",
            "ce-id": f"cold-{time.monotonic_ns()}",
            "ce-source": "https://kubernetes.default.svc",
            "ce-type": event_types.APISERVER_UPDATE,
            "ce-subject": f"/apis/kubeopera.io/v1alpha1/namespaces/{ref.namespace}/tenants/{ref.name}",
            "ce-kind": "Tenant",
            "content-type": "application/json",
        }
        return headers, json.dumps(obj).encode()
    if service == "tenant-resync":
        return ping_event(project_path("eventing", "resync-pingsource.yaml"))
    kinds = {
        "tenant-install": (event_types.INSTALL, ref),
        "tenant-check-ready": (event_types.PROVISIONING, ref),
        "tenant-store-kubeconfig": (event_types.READY, ref),
        "tenant-notify-api": (event_types.KUBECONFIG_STORED, ref),
        "tenant-cleanup": (event_types.CLEANUP, ref),
        # another incarnation of the Tenant: the dead-letter sink reads it and has nothing to mark
        "tenant-dead-letter": (event_types.PROVISIONING, TenantRef(ref.namespace, ref.name, "not-this-uid", 1)),
    }
    event_type, about = kinds[service]
    extra = {"kubeconfigSecret": f"tenant-{REF_TENANT}-kubeconfig"} if service == "tenant-notify-api" else {}
    return events.to_binary(events.make(event_type, "bench", about, **extra))


def cold_start(stack: Stack, service: str, headers: Mapping[str, str], body: bytes) -> tuple[float, int, float]:
    """(seconds from spawn to the first answer, its status, the worker's RSS MiB after it)."""
    spec = stack.function_specs[service]
    port = free_port()
    env = os.environ | dict(spec.env) | {"PORT": str(port)}
    log = (stack.log_dir() / f"{service}-cold.log").open("ab")
    session = requests.Session()
    session.trust_env = False
    started = time.perf_counter()
    proc = subprocess.Popen(spec.argv, env=env, cwd=spec.cwd, stdout=log, stderr=log, start_new_session=True)
    try:
        while True:
            try:
                answer = session.post(f"http://127.0.0.1:{port}/", headers=dict(headers), data=body, timeout=60)
                break
            except requests.ConnectionError:
                if proc.poll() is not None:
                    raise RuntimeError(f"{service} exited with {proc.returncode}; see {log.name}") from None
                time.sleep(0.005)
        elapsed = time.perf_counter() - started
        memory = max((rss_mib(pid) for pid in children(proc.pid)), default=0.0)
        return elapsed, answer.status_code, memory
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        log.close()
        session.close()


_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def import_costs(module: str) -> dict[str, float]:
    """Cumulative seconds of the first import of ``module`` and of each dependency in it."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=project_path(),
    )
    costs: dict[str, float] = {}
    for line in done.stderr.splitlines():
        matched = _IMPORT_LINE.match(line)
        if not matched:
            continue
        name, cumulative = matched.group(4), int(matched.group(2)) / 1e6
        if name == module or (name in DEPENDENCIES and name not in costs):
            costs[name] = cumulative
    return costs


def interpreter_start() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


def main(argv: Sequence[str]) -> list[Table]:
    parser = argparse.ArgumentParser(
        prog="python -m bench coldstart", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    starts: dict[str, list[float]] = defaultdict(list)
    statuses: dict[str, set[int]] = defaultdict(set)
    memory: dict[str, list[float]] = defaultdict(list)
    options = StackOptions(vcluster_boot_seconds=0, ready_poll_seconds=1, resync_at_start=False, log_level="WARNING")
    with start_stack(options) as stack:
        kube = Kube.connect(stack.admin_kubeconfig)
        try:
            provision(stack, kube, REF_TENANT)
            assert stack.watch.wait_idle(60)
            obj = json.loads(stack.kubectl("get", "kt", REF_TENANT, "-n", TENANT_NAMESPACE, "-o", "json"))
            found = kube.get_tenant(TENANT_NAMESPACE, REF_TENANT)
            assert found is not None
            for _ in range(args.runs):
                for service in MODULES:
                    headers, body = event_for(service, stack, obj, found.ref)
                    headers = dict(headers) | stack.delivery_authorization(service)
                    seconds, status, mib = cold_start(stack, service, headers, body)
                    starts[service].append(seconds)
                    statuses[service].add(status)
                    memory[service].append(mib)
        finally:
            kube.close()
    imports: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    bare = [interpreter_start() for _ in range(args.runs)]
    for _ in range(args.runs):
        for service, module in MODULES.items():
            for name, seconds in import_costs(module).items():
                imports[service][name].append(seconds)
    start_rows = [
        (
            service,
            spread(starts[service]),
            "/".join(str(s) for s in sorted(statuses[service])),
            spread(memory[service], digits=1),
            spread(imports[service][MODULES[service]]),
        )
        for service in MODULES
    ]
    cold = table(
        f"Cold start: process spawned to first event answered ({args.runs} runs: median (min-max))",
        ("function", "to first answer (s)", "status", "worker RSS after (MiB)", "import of its module (s)"),
        start_rows,
        (
            f"bare interpreter start (python -c pass): {spread(bare, digits=3)} s",
            "Knative adds its own (pod scheduling, image, queue-proxy) before this; the chart cache is warm here.",
        ),
    )
    dep_rows = []
    for dep in DEPENDENCIES:
        per = [statistics.median(imports[s][dep]) for s in MODULES if imports[s].get(dep)]
        if per:
            dep_rows.append((dep, f"{statistics.median(per) * 1000:.0f}", f"{len(per)} of {len(MODULES)}"))
    deps = table(
        "Import cost of each dependency, its first import inside a function's module (ms, median)",
        ("dependency", "cumulative ms", "imported by"),
        dep_rows,
        ("Cumulative: with what it imports itself, when imported first; a later import of it costs nothing.",),
    )
    return [cold, deps]
