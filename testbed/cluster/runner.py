"""``kubeopera-tenants local --cluster``: the pipeline on the cluster tier, and a live view of it.

Starts everything :mod:`testbed.cluster.stack` describes (a cold first run builds the cluster
tier's tools and images first), optionally writes the admin kubeconfig, creates the example
Tenant and prints, as they happen, each Tenant's phase changes and how many pods each function's
Knative Service runs (Knative scaling it from zero and back). Ctrl-C (or SIGTERM) stops it all
and puts the machine back as it was.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from shared.adapters.kube import Kube
from shared.errors import TenantError
from testbed.cluster.scaling import ready_pods
from testbed.cluster.stack import NAMESPACE, ClusterOptions, ClusterStack, start_cluster
from testbed.live import EXAMPLE, LiveView
from testbed.processes import ProcessError, install_signal_handlers
from testbed.project import export_kubeconfig, project_path


@dataclass(frozen=True)
class ClusterRunOptions:
    kubeconfig_out: Path | None = None
    create_example: bool = True
    vcluster_boot_seconds: float = 20.0


@dataclass
class _Shown:
    """The live view, and what only this tier shows: the functions' pods."""

    view: LiveView
    pods: Mapping[str, int] = field(default_factory=dict)


def run_cluster(options: ClusterRunOptions, out: TextIO) -> int:
    if threading.current_thread() is threading.main_thread():
        # A shell starts background jobs with SIGINT ignored; Ctrl-C must always stop us.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        install_signal_handlers()  # SIGTERM/SIGHUP tear down as Ctrl-C does
    print(
        "kubeopera-tenants local --cluster: starting a real node with Knative Serving and Eventing "
        "(a cold first run builds the tools and images: about 20 minutes)...",
        file=out,
        flush=True,
    )
    cluster_options = ClusterOptions(vcluster_boot_seconds=options.vcluster_boot_seconds)
    try:
        with start_cluster(cluster_options) as cluster:
            _serve(cluster, options, out)
    except (KeyboardInterrupt, SystemExit):
        pass
    except TenantError as err:
        print(f"error: {err}", file=out, flush=True)
        return 1
    print("stopped; the node is gone and the machine is as it was.", file=out, flush=True)
    return 0


def _serve(cluster: ClusterStack, options: ClusterRunOptions, out: TextIO) -> None:
    shown = _Shown(LiveView(out))
    kubeconfig = export_kubeconfig(cluster.admin_kubeconfig, options.kubeconfig_out)
    shown.view.say("ready: the node, Knative Serving with Traefik, Knative Eventing and the functions' Services")
    print(
        f"\nUse kubectl against it:\n  export KUBECONFIG={kubeconfig}\n"
        f"  kubectl get kt,ksvc -n {NAMESPACE}\n  kubectl get pods -A\n"
        f"Callbacks go to the kubeopera-api stand-in at {cluster.api.url}; logs are in {cluster.log_dir()}\n"
        "Ctrl-C stops everything.\n",
        file=out,
        flush=True,
    )
    kube = Kube.connect(cluster.admin_kubeconfig)
    try:
        if options.create_example:
            cluster.kubectl("apply", "-f", str(project_path(*EXAMPLE)))
            shown.view.say("created Tenant kubeopera-system/alice-default")
        while True:
            _poll(cluster, kube, shown)
            time.sleep(1)
    finally:
        kube.close()


def _poll(cluster: ClusterStack, kube: Kube, shown: _Shown) -> None:
    with contextlib.suppress(ProcessError, ValueError):  # a failed sample is shown at the next one
        pods = ready_pods(cluster.node, NAMESPACE, cluster.services)
        if pods != shown.pods:
            running = ", ".join(f"{s.removeprefix('tenant-')} {n}" for s, n in pods.items() if n) or "none"
            shown.view.say(f"pods running per function: {running}")
            shown.pods = pods
    shown.view.tenants(kube, NAMESPACE)
