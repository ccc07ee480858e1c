"""Measure the pipeline against the raw cost of helm, on the local stack, and print a table.

What it runs (``python -m bench helm --runs N``):

- raw ``helm upgrade --install`` of the vcluster chart, from the OCI registry (what Helm 3 does
  on every install: it downloads the chart again) and from a local chart folder (what the
  install function does after its first pull);
- raw ``helm status`` (check-ready's cost per poll);
- the install function handling an ApiServerSource ``add`` event (re-read, namespace, helm,
  status write), posted straight to it;
- the whole pipeline, Tenant created with kubectl to phase Ready, with the vCluster stand-in
  booting at once and a 1 s poll, so what is left is the pipeline's own overhead;
- resident memory of each function's gunicorn worker after the runs.

Numbers are wall-clock on this machine; they are for comparison, and no test asserts them.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import requests

from shared.delivery import events
from shared.model import event_types
from shared.model.tenant import Tenant
from testbed.admin_kube import AdminKube
from testbed.local.stack import Stack, StackOptions, start_stack
from testbed.processes import run
from testbed.processes.procfs import children, rss_mib
from testbed.registry import helm_env

from .report import Table, table
from .workload import provision, tenant


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


def bench(stack: Stack, runs: int) -> list[tuple[str, list[float]]]:
    helm = [str(stack.tools.helm), f"--kubeconfig={stack.admin_kubeconfig}"]
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=stack.run_dir))
    env = helm_env(work / "helm")
    run([*helm, "pull", stack.chart_ref, "--version", "0.21.2", "--untar", "--destination", str(work)], env=env)
    local_chart = work / "vcluster"
    stack.kubectl("create", "namespace", "bench-raw")
    counter = iter(range(10_000))

    def raw_oci() -> None:
        run(
            [
                *helm,
                "upgrade",
                "--install",
                f"vc-oci-{next(counter)}",
                stack.chart_ref,
                "--version",
                "0.21.2",
                "-n",
                "bench-raw",
            ],
            env=env,
        )

    local_releases: list[str] = []

    def raw_local() -> None:
        local_releases.append(f"vc-local-{next(counter)}")
        run([*helm, "upgrade", "--install", local_releases[-1], str(local_chart), "-n", "bench-raw"], env=env)

    def raw_status() -> None:
        run([*helm, "status", local_releases[0], "-n", "bench-raw", "-o", "json"], env=env)

    kube = AdminKube.connect(stack.admin_kubeconfig)

    install_sender = stack.delivery_authorization("tenant-install")  # as the broker's filter sends it

    def install_function() -> None:
        name = f"bench-fn-{next(counter)}"
        obj = kube.create_tenant(tenant(name))
        headers, body = events.to_binary(events.make(event_types.INSTALL, "bench", Tenant.from_object(obj).ref))
        response = requests.post(
            stack.function_urls["tenant-install"], headers=headers | install_sender, data=body, timeout=120
        )
        # The router sends install the same Tenant through the broker too; either may win, both are fine.
        assert response.status_code in (200, 204), response.text

    def to_ready() -> None:
        provision(stack, kube, f"bench-e2e-{next(counter)}")

    results = [
        ("helm upgrade --install, chart from OCI registry", timed(raw_oci, runs)),
        ("helm upgrade --install, chart from local folder", timed(raw_local, runs)),
        ("helm status", timed(raw_status, runs)),
        ("install function, add event -> reply", timed(install_function, runs)),
        ("pipeline, kubectl apply -> phase Ready (boot 0 s, poll 1 s)", timed(to_ready, runs)),
    ]
    kube.close()
    return results


def main(argv: Sequence[str]) -> list[Table]:
    parser = argparse.ArgumentParser(prog="python -m bench helm", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    options = StackOptions(vcluster_boot_seconds=0, ready_poll_seconds=1, resync_at_start=False, log_level="WARNING")
    with start_stack(options) as stack:
        results = bench(stack, args.runs)
        memory = {
            service: max((rss_mib(pid) for pid in children(proc.pid)), default=0.0)
            for proc in stack.supervisor.processes
            if (service := proc.name) in stack.function_urls
        }
        knative = {
            proc.name: rss_mib(proc.pid)
            for proc in stack.supervisor.processes
            if proc.name in stack.eventing.processes or proc.name.startswith("pod-")
        }
    return [
        table(
            f"One at a time: helm alone against the pipeline ({args.runs} runs, seconds)",
            ("what", "median", "min", "max"),
            [(name, f"{statistics.median(s):.3f}", f"{min(s):.3f}", f"{max(s):.3f}") for name, s in results],
        ),
        table(
            "Resident memory after the runs (MiB)",
            ("process", "RSS"),
            [(f"{service} (worker)", f"{mib:.1f}") for service, mib in sorted(memory.items())]
            + [(f"Knative: {name}", f"{mib:.1f}") for name, mib in sorted(knative.items())]
            + [("Knative: total", f"{sum(knative.values()):.1f}")],
            ("pod-* are the sources' adapters, run as host processes.",),
        ),
    ]
