"""A burst of Tenants against helm's own floor, and what each Tenant cost on the way.

``python -m bench burst --tenants 50 --runs 3`` starts the local stack (vCluster boot 0 s, poll
1 s, no resync tick; install's one process serving as many requests at once as its Knative Service
does across the cluster, ``max-scale`` x ``containerConcurrency`` in ``deploy/base/services``: 4 x 2)
with helm behind a counting wrapper (``HELM_EXECUTABLE``: the real helm,
each invocation's subcommand appended to a file), provisions one Tenant to warm the chart cache,
then ``runs`` times:

1. creates N Tenants with one ``kubectl apply`` and records when each is first seen Ready;
2. deletes them (cleanup uninstalls each release) and waits until all are gone;
3. on the same control plane and chart folder, N plain ``helm upgrade --install`` one after the
   other (the original operator's single reconcile worker: the sequential floor), and N at once
   (the parallel floor), each release in a namespace of its own, with a Tenant's values.

From the same runs, off the wire (the service proxy between Knative's broker and the functions)
and from the functions' ``answered`` log lines (``shared.observability.timing``), it prints:

- **burst**: all Ready, per-Tenant time to Ready p50/p95/max, Tenants per minute, the floors,
  and the pipeline's throughput as a multiple of each floor;
- **where the time goes**: per Tenant, the median of the source and broker until install is
  called, install (of which helm), the polls, the other steps, and the broker's gaps;
- **per hop**: per function, delivery p50/p99 on the wire, in the function without helm, and
  helm; the broker's added latency between a reply and the delivery of that reply;
- **cost per Tenant**: API requests by verb and resource (the audit log; the functions' own
  client and helm apart), helm invocations by subcommand, chart loads from the registry;
- **poll accuracy**: a Tenant whose vCluster never boots, polled with the 1 s poll: the intervals
  between check-ready's re-deliveries;
- **memory**: each function's gunicorn worker's resident memory after the bursts.

Figures are medians over the runs with their spread; ratios are taken within one run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import requests
import yaml

from shared.adapters.kube import Kube
from shared.model.tenant import Phase, Tenant
from shared.model.values import vcluster_values
from testbed.controlplane.startup import SERVICE_CLUSTER_IP_RANGE
from testbed.knative.broker_watch import Delivery
from testbed.local import profiling
from testbed.local.manifests import VCLUSTER_WATCH, declared_concurrency
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, start_stack
from testbed.processes import run
from testbed.processes.procfs import children, cpu_seconds, rss_mib
from testbed.registry import helm_env
from testbed.toolchain import ensure_all

from . import apiserver_profile
from .report import Table, ms, percentile, spread, table
from .workload import provision, tenant

log = logging.getLogger(__name__)

FUNCTIONS = (
    "tenant-router",
    "tenant-install",
    "tenant-check-ready",
    "tenant-store-kubeconfig",
    "tenant-notify-api",
    "tenant-cleanup",
)
INSTALL = "tenant-install"
OURS = f"system:serviceaccount:{TENANT_NAMESPACE}:"
# What feeds the broker runs as ServiceAccounts of the same namespace: tenant-source's adapter
# (eventing/) and the vCluster watch (vcluster-source's adapter until 2026-12-06). Their LISTs
# and WATCHes are not the functions' requests, and are counted on their own rows.
SOURCES = frozenset({f"{OURS}tenant-source", f"{OURS}{VCLUSTER_WATCH}"})
# Knative Eventing's controller runs as the test bed's admin; its client's user agent names the
# binary (client-go's default: "controller/<version> (<os>/<arch>) ..."). Its SubjectAccessReviews
# are the ApiServerSource reconciler's access check: get, list and watch in every namespace the
# source's namespaceSelector matches, on every reconcile (a namespace change resyncs all sources).
EVENTING_CONTROLLER = "controller/"
POLL_TENANT = "pollbench"
POLL_SECONDS = 1


@dataclass(frozen=True)
class Burst:
    """One burst: when it began (time.time()), when each Tenant was first seen Ready."""

    started: float
    ready_at: Mapping[str, float]  # Tenant name -> time.time()
    idle: float  # time.time() when the broker had nothing left to deliver
    cpu: Mapping[str, float]  # CPU seconds by part of the stack, from apply to idle
    proxied: int  # requests the service proxy answered, from apply to idle (a tunnel is one)

    def during(self, at: float) -> bool:
        return self.started <= at <= self.idle

    @property
    def seconds(self) -> float:
        return max(self.ready_at.values()) - self.started

    def to_ready(self) -> list[float]:
        return [at - self.started for at in self.ready_at.values()]


@dataclass(frozen=True)
class Floors:
    sequential: float
    parallel: float
    # the sequential floor as install runs helm (HELM_VALIDATE_MANIFESTS off: no client-side
    # OpenAPI check, shared.adapters.helm); the floors above are helm's defaults
    sequential_unchecked: float = 0.0


def counting_helm(real: Path, folder: Path) -> tuple[Path, Path]:
    """A helm that appends ``<time> <subcommand>`` to a file, then is the real helm (exec: same process)."""
    calls = folder / "helm-calls.log"
    wrapper = folder / "helm"
    wrapper.write_text(f'#!/bin/sh\necho "$(date +%s.%N) $1" >> {calls}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    calls.touch()
    return wrapper, calls


def received_at(entry: Mapping[str, Any]) -> float:
    """When the API server received an audit entry's request (time.time())."""
    return datetime.fromisoformat(entry["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class PhaseWatch:
    """``kubectl get tenants --watch``: when each Tenant was first seen in phase Ready. One watch
    stream costs the API server next to nothing; polling a list of N Tenants ten times a second
    would take CPU from the pipeline being measured."""

    def __init__(self, stack: Stack) -> None:
        argv = [str(stack.tools.kubectl), f"--kubeconfig={stack.admin_kubeconfig}", "get", "kt", "-n"]
        argv += [TENANT_NAMESPACE, "--watch", "--no-headers", "-o", "custom-columns=N:.metadata.name,P:.status.phase"]
        self.ready_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            now = time.time()
            fields = line.split()
            if len(fields) == 2 and fields[1] == Phase.READY.value:
                with self._lock:
                    self.ready_at.setdefault(fields[0], now)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def ready(self, names: Iterable[str]) -> dict[str, float]:
        with self._lock:
            return {n: self.ready_at[n] for n in names if n in self.ready_at}

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)


def burst(stack: Stack, watch: PhaseWatch, names: Sequence[str], timeout: float) -> Burst:
    manifest = "\n---\n".join(yaml.safe_dump(tenant(name)) for name in names)
    cpu_before = cpu_by_part(stack, (watch.pid,))
    proxied = stack.proxy.handled()
    started = time.time()
    stack.kubectl("apply", "-f", "-", input=manifest)
    while len(ready_at := watch.ready(names)) < len(names):
        if time.time() - started > timeout:
            raise RuntimeError(f"{len(ready_at)} of {len(names)} Tenants Ready after {timeout:.0f} s")
        time.sleep(0.5)
    if not stack.watch.wait_idle(120):
        raise RuntimeError(f"the broker still has retries to make: {stack.watch.pending()}")
    idle = time.time()
    cpu = {part: seconds - cpu_before.get(part, 0.0) for part, seconds in cpu_by_part(stack, (watch.pid,)).items()}
    return Burst(started, ready_at, idle, cpu, stack.proxy.handled() - proxied)


def delete_tenants(stack: Stack, kube: Kube, names: Sequence[str], timeout: float) -> float:
    """Delete the Tenants, wait until they are gone (cleanup uninstalled their releases and their
    namespaces are gone) and the broker is idle; the seconds until the last was gone."""
    began = time.time()
    stack.kubectl("delete", "kt", *names, "-n", TENANT_NAMESPACE, "--wait=false")
    wanted = set(names)
    while wanted & {t.name for t in kube.list_tenants(TENANT_NAMESPACE, "")}:
        if time.time() - began > timeout:
            raise RuntimeError(f"Tenants not gone after {timeout:.0f} s")
        time.sleep(0.5)
    gone = time.time() - began
    if not stack.watch.wait_idle(120):
        raise RuntimeError(f"the broker still has retries to make: {stack.watch.pending()}")
    return gone


def delete_namespaces(stack: Stack, prefix: str, timeout: float = 300) -> None:
    """Delete the namespaces named ``prefix*`` and wait until they are gone: the test bed's
    Service range (a /24) holds 254 ClusterIPs, one per vCluster."""
    began = time.time()
    while True:
        found = [n.split("/", 1)[1] for n in stack.kubectl("get", "namespaces", "-o", "name").split()]
        mine = [n for n in found if n.startswith(prefix)]
        if not mine:
            return
        if time.time() - began > timeout:
            raise RuntimeError(f"{len(mine)} namespaces {prefix}* not gone after {timeout:.0f} s")
        stack.kubectl("delete", "namespace", *mine, "--wait=false", "--ignore-not-found")
        time.sleep(1)


# The parallel floor runs at most this many helm processes at once: 200 at once made the test
# bed's API server drop helm's connections ("http2: client connection lost"), 2026-12-04.
PARALLEL_MAX = 50


def floors(stack: Stack, chart: Path, values: Path, run_no: int, count: int) -> Floors:
    """N sequential and N parallel (at most ``PARALLEL_MAX`` at once) ``helm upgrade --install``
    of the same chart folder and values."""
    helm = [str(stack.tools.helm), f"--kubeconfig={stack.admin_kubeconfig}"]
    env = os.environ | helm_env(stack.run_dir / "bench-helm")

    def argv(kind: str, k: int) -> list[str]:
        # Not in a vcluster-* namespace: helm runs as admin here, and deploy/base's policy
        # tenant-helm-records.yaml reserves helm's records there for tenant-install and -cleanup.
        name = f"floor-{kind}-{run_no}-{k:03d}"
        return [*helm, "upgrade", "--install", f"vc-{name}", str(chart), "-n", f"bench-{name}"] + [
            "--create-namespace",
            "-f",
            str(values),
            *(["--disable-openapi-validation"] if kind == "unchecked" else []),
        ]

    began = time.perf_counter()
    for k in range(count):
        run(argv("seq", k), env=env)
    sequential = time.perf_counter() - began
    delete_namespaces(stack, f"bench-floor-seq-{run_no}-")

    def one(k: int) -> str | None:
        done = subprocess.run(argv("par", k), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        return done.stderr.decode() if done.returncode else None

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(count, PARALLEL_MAX)) as pool:
        failed = [err for err in pool.map(one, range(count)) if err is not None]
    parallel = time.perf_counter() - began
    if failed:
        raise RuntimeError(f"{len(failed)} parallel helm installs failed: {failed[0]}")
    delete_namespaces(stack, f"bench-floor-par-{run_no}-")
    began = time.perf_counter()
    for k in range(count):
        run(argv("unchecked", k), env=env)
    unchecked = time.perf_counter() - began
    delete_namespaces(stack, f"bench-floor-unchecked-{run_no}-")
    return Floors(sequential, parallel, unchecked)


def covered(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``intervals``."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def subject_tenant(delivery: Delivery) -> str:
    """The Tenant a delivery is about: the last segment of its subject (ours: ns/name;
    the ApiServerSource's: the object's path)."""
    return (delivery.subject or "").rsplit("/", 1)[-1]


def answered_lines(log_dir: Path, services: Iterable[str]) -> dict[str, dict[str, Any]]:
    """event id + service -> the function's ``answered`` record (the last one per id: a retry
    of the same event is answered again)."""
    found: dict[str, dict[str, Any]] = {}
    for service in services:
        for line in lines(log_dir / f"{service}.log"):
            if '"answered"' not in line:
                continue
            try:
                record_ = json.loads(line)
            except ValueError:
                continue
            if record_.get("message") == "answered" and record_.get("id"):
                found[f"{service}/{record_['id']}/{record_.get('status')}"] = record_
    return found


def broker_gaps(deliveries: Sequence[Delivery], replies_from: Mapping[str, Delivery]) -> dict[str, list[float]]:
    """Per hop "a -> b": from a's reply answered to the broker delivering that reply to b."""
    gaps: dict[str, list[float]] = defaultdict(list)
    for d in deliveries:
        if d.target != "subscriber":
            continue
        source = replies_from.get(d.event_id)
        if source is not None and source.service != d.service:
            gaps[f"{source.service.removeprefix('tenant-')} -> {d.service.removeprefix('tenant-')}"].append(
                d.time - source.finished
            )
    return gaps


def replies_by_id(stack: Stack, deliveries: Sequence[Delivery]) -> dict[str, Delivery]:
    """The reply event id -> the delivery that answered with it (the proxy keeps the reply's ce-id)."""
    reply_of = {(h.started, h.service): h.response["ce-id"] for h in stack.proxy.hops() if h.response.get("ce-id")}
    return {reply_of[(d.time, d.service)]: d for d in deliveries if (d.time, d.service) in reply_of}


def poll_intervals(stack: Stack, kube: Kube, polls: int) -> tuple[list[float], list[float]]:
    """Re-delivery intervals of check-ready for a Tenant whose vCluster never boots:
    (answer -> next delivery, start -> start)."""
    provisioned = time.time()
    stack.kubectl("apply", "-f", "-", input=yaml.safe_dump(tenant(POLL_TENANT)))
    deadline = provisioned + 30 + polls * (POLL_SECONDS + 1)

    def checks() -> list[Delivery]:
        return [
            d
            for d in stack.watch.deliveries()
            if d.service == "tenant-check-ready" and d.time >= provisioned and subject_tenant(d) == POLL_TENANT
        ]

    while len(checks()) < polls + 1 and time.time() < deadline:
        time.sleep(0.5)
    found = checks()
    stack.kubectl("delete", "kt", POLL_TENANT, "-n", TENANT_NAMESPACE, "--wait=false")
    by_event: dict[str, list[Delivery]] = defaultdict(list)
    for d in found:
        by_event[d.event_id].append(d)
    gaps, periods = [], []
    for attempts in by_event.values():
        for a, b in zip(attempts, attempts[1:], strict=False):
            gaps.append(b.time - a.finished)
            periods.append(b.time - a.time)
    return gaps, periods


# The test bed's service proxy (the cluster DNS and kube-proxy stand-in, tools/service-proxy,
# started by this process) has a row of its own; in a cluster that forwarding is kube-proxy's rules
# in the kernel. Until 2026-12-07 it was Python threads of this process: at first its forwarding
# was in this process's row ("this benchmark (kubectl, watch)", which also left out the running
# `kubectl get --watch`: a child's CPU reaches the parent's only once it is reaped); from 15:14
# that day its handler threads' time had its own row; from 19:07 it is a Go process, about half
# the Python proxy's CPU a request (0.51-0.55 ms against 1.08). Reading its hop lines is this
# process's work.
BENCH_PART = "this benchmark's process (its watches, the kubeopera-api stand-in) and its kubectl"
PROXY_PART = "the test bed's service proxy (in a cluster: the kernel's forwarding)"


def cpu_by_part(stack: Stack, running: Iterable[int] = ()) -> dict[str, float]:
    """CPU seconds so far by part of the stack. A function's helm processes are its worker's
    reaped children (cutime); gunicorn's master and the Python worker are the function's own.
    ``running``: this benchmark's children still running (its watch's kubectl), counted with it."""
    parts: dict[str, float] = defaultdict(float)
    for proc in stack.supervisor.processes:
        seconds = [cpu_seconds(pid) for pid in (proc.pid, *children(proc.pid))]
        own, reaped = sum(s[0] for s in seconds), sum(s[1] for s in seconds)
        if proc.name == VCLUSTER_WATCH:
            parts["the vCluster watch"] += own
            continue
        if proc.name in stack.function_urls:
            parts["functions (Python)"] += own
            parts["helm, run by the functions"] += reaped
            continue
        if proc.name in ("kube-apiserver", "etcd", "kube-controller-manager"):
            part = proc.name
        elif proc.name in stack.eventing.processes:
            part = "Knative Eventing (broker, channel, controllers)"
        elif proc.name.startswith("pod-"):
            part = "Knative sources' adapters"
        else:
            part = "the vCluster stand-in and other test bed processes"
        parts[part] += own + reaped
    for pid in (os.getpid(), *running):
        own, reaped = cpu_seconds(pid)
        parts[BENCH_PART] += own + reaped
    parts[PROXY_PART] += stack.proxy.cpu_seconds()  # a running child: not in this process's row
    return dict(parts)


def worker_rss(stack: Stack, field: str = "VmRSS") -> dict[str, float]:
    """Each function's gunicorn worker's resident memory in MiB (``VmHWM``: its peak so far)."""
    memory: dict[str, float] = {}
    for proc in stack.supervisor.processes:
        if proc.name in stack.function_urls:
            workers = children(proc.pid)
            memory[proc.name] = max((rss_mib(pid, field) for pid in workers), default=0.0)
    return memory


# -- tables -----------------------------------------------------------------------------------


def burst_table(
    n: int, bursts: Sequence[Burst], floors_: Sequence[Floors], deletions: Sequence[float], install_threads: int
) -> Table:
    per_minute = [n / b.seconds * 60 for b in bursts]
    seq_ratio = [f.sequential / b.seconds for b, f in zip(bursts, floors_, strict=True)]
    par_ratio = [f.parallel / b.seconds for b, f in zip(bursts, floors_, strict=True)]
    to_ready = [b.to_ready() for b in bursts]
    rows = [
        ("pipeline: all N Ready (s)", spread([b.seconds for b in bursts])),
        ("  per Tenant to Ready p50 (s)", spread([statistics.median(t) for t in to_ready])),
        ("  per Tenant to Ready p95 (s)", spread([percentile(t, 95) for t in to_ready])),
        ("  per Tenant to Ready max (s)", spread([max(t) for t in to_ready])),
        ("  Tenants per minute", spread(per_minute, digits=0)),
        ("then all N deleted: all gone (s)", spread(deletions)),
        ("sequential helm upgrade --install x N (s)", spread([f.sequential for f in floors_])),
        (
            f"parallel helm upgrade --install x N, at most {PARALLEL_MAX} at once (s)",
            spread([f.parallel for f in floors_]),
        ),
        ("pipeline throughput / sequential floor", spread(seq_ratio) + "x"),
        ("pipeline throughput / parallel floor", spread(par_ratio) + "x"),
        (
            "sequential helm upgrade --install --disable-openapi-validation x N (s)",
            spread([f.sequential_unchecked for f in floors_]),
        ),
        (
            "pipeline throughput / that floor (helm as install runs it)",
            spread([f.sequential_unchecked / b.seconds for b, f in zip(bursts, floors_, strict=True)]) + "x",
        ),
    ]
    return table(
        f"Burst: {n} Tenants at once, vCluster boot 0 s, poll 1 s ({len(bursts)} runs: median (min-max))",
        ("what", "figure"),
        rows,
        (
            "A ratio above 1 is faster than that floor. The floors run helm alone: no Tenant, no status, no broker.",
            f"install served {install_threads} deliveries at once (GUNICORN_THREADS of its one process).",
        ),
    )


def where_table(
    bursts: Sequence[Burst], deliveries: Sequence[Delivery], answered: Mapping[str, Mapping[str, Any]]
) -> Table:
    parts: dict[str, list[float]] = defaultdict(list)
    for b in bursts:
        window = [d for d in deliveries if b.during(d.time)]
        by_tenant: dict[str, list[Delivery]] = defaultdict(list)
        for d in window:
            by_tenant[subject_tenant(d)].append(d)
        for name, ready in b.ready_at.items():
            mine = sorted(by_tenant.get(name, []), key=lambda d: d.time)
            installs = [d for d in mine if d.service == "tenant-install"]
            if not installs:
                continue
            helm = sum(
                float(answered.get(f"{d.service}/{d.event_id}/{d.status}", {}).get("helm_seconds", 0.0))
                for d in installs
            )
            checks = [d for d in mine if d.service == "tenant-check-ready"]
            rest = [d for d in mine if d.service in ("tenant-store-kubeconfig", "tenant-notify-api")]
            busy = covered([(d.time, min(d.finished, ready)) for d in mine if installs[0].time <= d.time <= ready])
            parts["created -> install first called (source, broker, queue)"].append(installs[0].time - b.started)
            parts["install deliveries, all (summed)"].append(sum(d.finished - d.time for d in installs))
            parts["install deliveries, all (wall, overlaps once)"].append(
                covered([(d.time, d.finished) for d in installs])
            )
            parts["  of which helm"].append(helm)
            parts["check-ready deliveries, all"].append(sum(d.finished - d.time for d in checks))
            parts["check-ready re-deliveries (polls)"].append(max(0, len(checks) - 1))
            parts["store-kubeconfig + notify-api deliveries"].append(sum(d.finished - d.time for d in rest))
            parts["not in a function (broker hops, poll waits)"].append(ready - installs[0].time - busy)
            parts["created -> first seen Ready"].append(ready - b.started)
    rows = []
    for label, samples in parts.items():
        rows.append(
            (label, f"{statistics.median(samples):.0f}" if "polls" in label else f"{statistics.median(samples):.3f}")
        )
    return table(
        "Where a burst Tenant's time goes (median over all Tenants of all runs, seconds)",
        ("part", "median"),
        rows,
        (
            "install deliveries: the router's io.kubeopera.tenant.install (and resync's), no Tenant status update.",
            "'not in a function': first install call to Ready, minus the time a function held one of its deliveries.",
        ),
    )


def cpu_table(n: int, bursts: Sequence[Burst]) -> Table:
    parts = sorted(
        {p for b in bursts for p in b.cpu}, key=lambda p: -statistics.median(b.cpu.get(p, 0) for b in bursts)
    )
    totals = [sum(b.cpu.values()) for b in bursts]
    capacity = [len(os.sched_getaffinity(0)) * (b.idle - b.started) for b in bursts]
    rows = [
        (
            part,
            spread([b.cpu.get(part, 0.0) for b in bursts], digits=1),
            f"{statistics.median(b.cpu.get(part, 0.0) / t for b, t in zip(bursts, totals, strict=True)) * 100:.0f}%",
            f"{statistics.median(b.cpu.get(part, 0.0) for b in bursts) / n * 1000:.0f}",
        )
        for part in parts
    ]
    rows.append(("all", spread(totals, digits=1), "100%", f"{statistics.median(totals) / n * 1000:.0f}"))
    busy = statistics.median(t / c for t, c in zip(totals, capacity, strict=True)) * 100
    notes = [f"The machine's cores were {busy:.0f}% busy over the bursts (CPU seconds / cores x wall time)."]
    if all(b.proxied for b in bursts):
        per_request = statistics.median(b.cpu.get(PROXY_PART, 0.0) / b.proxied for b in bursts) * 1000
        requests = statistics.median(b.proxied for b in bursts) / n
        notes.append(f"The service proxy answered {requests:.1f} requests a Tenant, {per_request:.2f} ms of CPU each.")
    return table(
        "Where the CPU goes during a burst (apply to broker idle; CPU seconds)",
        ("part", "CPU s", "share", "ms per Tenant"),
        rows,
        tuple(notes),
    )


def hop_table(
    deliveries: Sequence[Delivery], answered: Mapping[str, Mapping[str, Any]], gaps: Mapping[str, list[float]]
) -> Table:
    rows = []
    for service in FUNCTIONS:
        mine = [d for d in deliveries if d.service == service and d.target == "subscriber"]
        if not mine:
            continue
        wire = [d.finished - d.time for d in mine]
        records = [answered.get(f"{service}/{d.event_id}/{d.status}") for d in mine]
        own = [float(r["seconds"]) - float(r["helm_seconds"]) for r in records if r]
        helm = [float(r["helm_seconds"]) for r in records if r and r["helm_operations"]]
        rows.append(
            (
                service,
                str(len(mine)),
                ms(statistics.median(wire)),
                ms(percentile(wire, 99)),
                ms(statistics.median(own)) if own else "n/a",
                ms(percentile(own, 99)) if own else "n/a",
                ms(statistics.median(helm)) if helm else "-",
            )
        )
    for hop, samples in sorted(gaps.items()):
        rows.append(
            (
                f"broker: {hop}",
                str(len(samples)),
                ms(statistics.median(samples)),
                ms(percentile(samples, 99)),
                "",
                "",
                "",
            )
        )
    return table(
        "Per hop, all deliveries of the bursts (ms)",
        ("function / hop", "deliveries", "wire p50", "wire p99", "own p50 (no helm)", "own p99 (no helm)", "helm p50"),
        rows,
        (
            "wire: the broker's request sent to the answer received (service proxy); own: the function's "
            "'answered' line, seconds minus helm_seconds.",
            "broker a -> b: a's reply answered to the broker delivering that reply to b (ingress, channel, filter).",
        ),
    )


def cost_table(
    stack: Stack, n_total: int, bursts: Sequence[Burst], helm_calls: Path, charts: Mapping[str, int]
) -> tuple[Table, Table]:
    """The cost per Tenant by client, and the functions' own client's requests by function."""
    assert stack.control_plane is not None
    audit = lines(stack.control_plane.audit_log)
    helm_lines = lines(helm_calls)
    by_request: Counter[tuple[str, str]] = Counter()
    by_function: Counter[tuple[str, str]] = Counter()
    by_helm: Counter[str] = Counter()
    for line in audit:
        entry = json.loads(line)
        user = entry["user"]["username"]
        agent = entry.get("userAgent", "")
        eventing = agent.startswith(EVENTING_CONTROLLER)
        if not (user.startswith(OURS) or eventing) or entry.get("stage") != "ResponseComplete":
            continue
        if not entry.get("objectRef"):
            continue
        at = received_at(entry)
        if not any(b.during(at) for b in bursts):
            continue
        if eventing:
            who = "eventing"
        elif user in SOURCES:
            who = "sources"
        else:
            who = "helm" if agent.lower().startswith("helm") else "client"
        ref = entry["objectRef"]
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        by_request[(who, f"{entry['verb']} {resource}")] += 1
        if who == "client":
            by_function[(user.removeprefix(OURS), f"{entry['verb']} {resource}")] += 1
    for line in helm_lines:
        at_text, _, sub = line.partition(" ")
        if any(b.during(float(at_text)) for b in bursts):
            by_helm[sub] += 1
    rows = []
    for who, title in (
        ("client", "API requests by the functions' client"),
        ("helm", "API requests by the functions' helm"),
        ("sources", "API requests by the sources: tenant-source's adapter, the vCluster watch (not the functions)"),
        ("eventing", "API requests by Knative Eventing's controller (not the functions)"),
    ):
        mine = {k[1]: v for k, v in by_request.items() if k[0] == who}
        total = sum(mine.values())
        rows.append((title, f"{total / n_total:.1f}"))
        for key, count in sorted(mine.items(), key=lambda kv: -kv[1]):
            rows.append((f"  {key}", f"{count / n_total:.2f}"))
    rows.append(("helm invocations", f"{sum(by_helm.values()) / n_total:.2f}"))
    for sub, count in sorted(by_helm.items(), key=lambda kv: -kv[1]):
        rows.append((f"  helm {sub}", f"{count / n_total:.2f}"))
    rows.append(("chart loads from the registry (whole run, all processes)", str(charts.get("registry", 0))))
    rows.append(("chart loads from the cache on disk (whole run)", str(charts.get("cache", 0))))
    cost = table(
        f"Cost per provisioned Tenant ({n_total} Tenants over {len(bursts)} bursts)",
        ("what", "per Tenant"),
        rows,
        (
            "From the API server's audit log (stage ResponseComplete), users system:serviceaccount:"
            f"{TENANT_NAMESPACE}:tenant-*; helm's own requests told apart by their user agent; the "
            "sources on their own rows (tenant-source's adapter; the vCluster watch, vcluster-source's adapter "
            "until 2026-12-06): until 2026-12-04 their LISTs and WATCHes were counted as the functions' client's. "
            "Knative Eventing's controller by its user agent (it runs as the test bed's admin), counted since "
            "2026-12-05: until 2026-12-06 its subjectaccessreviews were vcluster-source's access check, three per "
            "Tenant namespace on each reconcile.",
            "helm invocations: every process the functions started (HELM_EXECUTABLE counting wrapper), by subcommand.",
        ),
    )
    return cost, function_cost_table(n_total, by_function)


def function_cost_table(n_total: int, by_function: Mapping[tuple[str, str], int]) -> Table:
    """The functions' own client's requests per provisioned Tenant, by function (who asks what)."""
    rows = []
    for function in sorted({f for f, _ in by_function}):
        mine = {k: v for (f, k), v in by_function.items() if f == function}
        rows.append((function, f"{sum(mine.values()) / n_total:.2f}"))
        for key, count in sorted(mine.items(), key=lambda kv: (-kv[1], kv[0])):
            rows.append((f"  {key}", f"{count / n_total:.2f}"))
    return table(
        f"API requests by the functions' client, by function ({n_total} Tenants)",
        ("function / request", "per Tenant"),
        rows,
        ("The first table's client rows, by the ServiceAccount that made them.",),
    )


def poll_table(gaps: Sequence[float], periods: Sequence[float]) -> Table:
    rows = [
        ("re-deliveries measured", str(len(gaps))),
        ("answer -> next delivery p50 (s)", f"{statistics.median(gaps):.3f}" if gaps else "n/a"),
        ("answer -> next delivery min-max (s)", f"{min(gaps):.3f}-{max(gaps):.3f}" if gaps else "n/a"),
        ("start -> next start p50 (s)", f"{statistics.median(periods):.3f}" if periods else "n/a"),
    ]
    return table(
        f"Poll accuracy: check-ready 503 + Retry-After: {POLL_SECONDS}, a vCluster that never boots",
        ("what", "figure"),
        rows,
        ("Knative's dispatcher waits Retry-After after the answer (retryAfterMax caps it).",),
    )


def memory_table(memory: Mapping[str, float]) -> Table:
    return table(
        "Resident memory of each function's gunicorn worker after the bursts (MiB)",
        ("function", "worker RSS"),
        [(service, f"{mib:.1f}") for service, mib in sorted(memory.items())],
    )


def chart_loads(stack: Stack) -> dict[str, int]:
    """kubeopera_tenant_chart_loads_total by source, summed over the functions."""
    totals: Counter[str] = Counter()
    for url in stack.function_urls.values():
        text = requests.get(url.rstrip("/") + "/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith("kubeopera_tenant_chart_loads_total{"):
                source = line.split('source="', 1)[1].split('"', 1)[0]
                totals[source] += int(float(line.rsplit(" ", 1)[1]))
    return dict(totals)


def main(argv: Sequence[str]) -> list[Table]:
    parser = argparse.ArgumentParser(
        prog="python -m bench burst", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--polls", type=int, default=10, help="check-ready re-deliveries to time (default 10)")
    parser.add_argument("--threads", type=int, default=None, help="GUNICORN_THREADS of every function")
    install_ceiling = declared_concurrency()[INSTALL]
    parser.add_argument(
        "--install-threads",
        type=int,
        default=install_ceiling,
        help=f"GUNICORN_THREADS of install's process, over --threads (default {install_ceiling}: "
        "its Service's max-scale x containerConcurrency, what the cluster serves at once)",
    )
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="SERVICE",
        help="profile every request of this function (tenant-install, ...; repeatable) with pyinstrument: "
        "its call tree goes to bench/profiles/, its hot spots to a table",
    )
    parser.add_argument(
        "--profile-apiserver",
        type=int,
        default=0,
        metavar="SECONDS",
        help="read kube-apiserver's CPU profile (pprof) for this long from the first burst's start: "
        "a table by layer, its top functions to bench/profiles/",
    )
    args = parser.parse_args(argv)
    apiserver: apiserver_profile.ApiServerProfile | None = None
    with tempfile.TemporaryDirectory(prefix="bench-burst-") as folder:
        wrapper, helm_calls = counting_helm(ensure_all().helm, Path(folder))
        env = {"HELM_EXECUTABLE": str(wrapper)} | ({"GUNICORN_THREADS": str(args.threads)} if args.threads else {})
        options = StackOptions(
            vcluster_boot_seconds=0,
            ready_poll_seconds=POLL_SECONDS,
            resync_at_start=False,
            vcluster_never_boot=f"^vc-{POLL_TENANT}$",
            function_env=env,
            service_env={INSTALL: {"GUNICORN_THREADS": str(args.install_threads)}},
            profile=tuple(args.profile),
            profile_dir=Path(folder) / "profiles",
            apiserver_args=(apiserver_profile.FLAG,) if args.profile_apiserver else (),
        )
        with start_stack(options) as stack:
            kube = Kube.connect(stack.admin_kubeconfig)
            phases = PhaseWatch(stack)
            try:
                provision(stack, kube, "warm-up")  # the chart pulled into each function's cache
                chart, values = floor_inputs(stack, kube, Path(folder))
                bursts, floors_, deletions = [], [], []
                for r in range(args.runs):
                    names = [f"burst{r}-{k:03d}" for k in range(args.tenants)]
                    if r == 0 and args.profile_apiserver:
                        apiserver = apiserver_profile.ApiServerProfile(stack, args.profile_apiserver, Path(folder))
                    bursts.append(burst(stack, phases, names, timeout=120 + 10 * args.tenants))
                    deletions.append(delete_tenants(stack, kube, names, timeout=120 + 10 * args.tenants))
                    floors_.append(floors(stack, chart, values, r, args.tenants))
                    log.warning(
                        "run %d: burst %.1f s, deleted in %.1f s, %s", r, bursts[-1].seconds, deletions[-1], floors_[-1]
                    )
                deliveries = stack.watch.deliveries()
                answered = answered_lines(stack.log_dir(), FUNCTIONS)
                window = [d for b in bursts for d in deliveries if b.during(d.time)]
                gaps = broker_gaps(window, replies_by_id(stack, window))
                memory = worker_rss(stack)
                charts = chart_loads(stack)
                poll_gaps, poll_periods = poll_intervals(stack, kube, args.polls)
                # before teardown
                cost, by_function = cost_table(stack, args.tenants * args.runs, bursts, helm_calls, charts)
            finally:
                phases.close()
                kube.close()
        profiles = [profile_table(Path(folder) / "profiles", service) for service in args.profile]
        if apiserver is not None:
            context = f"the first {args.profile_apiserver} s of a burst of {args.tenants}"
            profiles.append(apiserver.table(context, PROFILES))
        return [
            *profiles,
            burst_table(args.tenants, bursts, floors_, deletions, args.install_threads),
            where_table(bursts, deliveries, answered),
            cpu_table(args.tenants, bursts),
            hop_table(window, answered, gaps),
            cost,
            by_function,
            poll_table(poll_gaps, poll_periods),
            memory_table(memory),
        ]


PROFILES = Path(__file__).resolve().parent / "profiles"


def profile_table(folder: Path, service: str, top: int = 25) -> Table:
    """``service``'s requests as its workers profiled them (the stack saved them when it stopped):
    the call tree written to ``bench/profiles/``, and the product's own functions by the wall
    time spent in them, callees included (a function counted once on each path)."""
    session = profiling.combined(folder, service)
    if session is None:
        raise RuntimeError(f"{service} saved no profile in {folder}")
    PROFILES.mkdir(exist_ok=True)
    written = PROFILES / f"{service}-{time.strftime('%Y%m%d-%H%M', time.gmtime())}.txt"
    written.write_text(profiling.render(session))
    root = session.root_frame()
    total = root.time if root is not None else 0.0
    spent: Counter[str] = Counter()

    def walk(frame: Any, above: frozenset[str]) -> None:
        path = frame.file_path or ""
        key = ""
        if "/site-packages/" not in path and ("/shared/" in path or "/functions/" in path):
            key = f"{frame.function} ({frame.file_path_short}:{frame.line_no})"
        if key and key not in above:
            spent[key] += frame.time
            above = above | {key}
        for child in frame.children:
            walk(child, above)

    if root is not None:
        walk(root, frozenset())
    rows = [(name, f"{seconds:.1f}", f"{100 * seconds / total:.0f}%") for name, seconds in spent.most_common(top)]
    return table(
        f"Where {service}'s requests spend their wall time (pyinstrument, every request of the run)",
        ("the product's function (callees included)", "seconds", "share"),
        rows,
        (
            f"{total:.1f} s of requests profiled in all (the warm-up's and the polls' too), sampled every "
            f"{profiling.INTERVAL * 1000:.0f} ms in the thread serving each; the call tree: "
            f"bench/profiles/{written.name}",
        ),
    )


def floor_inputs(stack: Stack, kube: Kube, folder: Path) -> tuple[Path, Path]:
    """The chart folder the install function loaded, and a Tenant's values as install renders them."""
    charts = sorted((stack.run_dir / "charts" / "tenant-install").glob("*/Chart.yaml"))
    if not charts:
        raise RuntimeError("the install function has no chart in its cache after the warm-up")
    warm = kube.get_tenant(TENANT_NAMESPACE, "warm-up")
    assert isinstance(warm, Tenant)
    values = folder / "values.yaml"
    values.write_text(yaml.safe_dump(vcluster_values(warm, "local", service_cidr=SERVICE_CLUSTER_IP_RANGE)))
    return charts[0].parent, values
