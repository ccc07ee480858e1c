"""The tools the test bed runs, built on first use: :class:`Toolchain`, ``ensure``, ``ensure_all``.

``ensure(name)`` returns a tool's bin folder, building it under the cache's lock if it is missing
(another process may have built it meanwhile; then it says so and builds nothing). ``ensure_all``
makes one plan of everything missing, so its estimate covers all the tools, builds them one after
another and returns their paths as a :class:`Toolchain`. ``KUBEBUILDER_ASSETS``, when set, supplies
``etcd``, ``kube-apiserver`` and ``kubectl`` as envtest does; envtest's assets carry no
``kube-controller-manager``, so that one is still built here. ``promtool`` and ``jaeger`` come last:
most of the test bed runs without them. ``knative_check`` is the Go program that runs Knative's own
validation (only the deployment checks need it).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.toolchain import progress as build_progress
from testbed.toolchain.builds import BUILDS, steps
from testbed.toolchain.cache import cache_root, is_complete, lock, timings_file, tool_dir
from testbed.toolchain.errors import ToolchainError
from testbed.toolchain.gobuild import build_tool
from testbed.toolchain.progress import Progress

_ENVTEST_BINARIES = ("etcd", "kube-apiserver", "kubectl")


@dataclass(frozen=True)
class Toolchain:
    """Absolute paths of the test bed's binaries."""

    etcd: Path
    kube_apiserver: Path
    kubectl: Path
    kube_controller_manager: Path
    helm: Path
    registry: Path
    apiserver_adapter: Path
    knative: Path  # bin folder: controller, mtchannel_broker, broker_ingress, broker_filter, in_memory_*, mtping
    knative_config: Path  # eventing/ (Eventing's config/) and serving-crds/ (Serving's 300-resources/)
    promtool: Path
    jaeger: Path  # Jaeger v2 all-in-one: the trace receiver with a query API (testbed.jaeger)
    service_proxy: Path  # the cluster DNS and kube-proxy stand-in (testbed.standins.service_proxy)

    def bin_dirs(self) -> list[Path]:
        return sorted({p.parent for p in (self.etcd, self.kube_apiserver, self.kubectl, self.helm)})


def _emit(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _progress(names: list[str]) -> Progress:
    """What is missing of the named tools, with the usual time of each step, reporting to stderr."""
    builds = [BUILDS[name] for name in names]
    plan = {build.name: steps(build) for build in builds if not is_complete(build, tool_dir(build))}
    recorded = build_progress.load_timings(timings_file()) if plan else {}
    return Progress(plan, recorded, time.monotonic, _emit)


def ensure(name: str, progress: Progress | None = None) -> Path:
    """Build the named tool if it is not in the cache yet; return its bin folder.

    ``progress`` is the plan of a caller that builds several tools (``ensure_all``), so its
    estimate of the time left covers them all.
    """
    build = BUILDS[name]
    target = tool_dir(build)
    if is_complete(build, target):
        return target / "bin"
    if progress is None:
        progress = _progress([name])
    with lock():
        if is_complete(build, target):
            progress.tool_skipped(name)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            progress.tool_started(name, build.version)
            build_tool(build, target, progress)
            progress.tool_finished(name)
    return target / "bin"


def _envtest_binaries(assets: str) -> tuple[Path, Path, Path]:
    folder = Path(assets)
    missing = [b for b in _ENVTEST_BINARIES if not (folder / b).is_file()]
    if missing:
        raise ToolchainError(f"KUBEBUILDER_ASSETS={assets} lacks {', '.join(missing)}")
    etcd, apiserver, kubectl = (folder / b for b in _ENVTEST_BINARIES)
    return etcd, apiserver, kubectl


def ensure_all() -> Toolchain:
    """Every binary the test bed runs, built on first use; honours KUBEBUILDER_ASSETS.

    kube-controller-manager is always built here: envtest's assets do not include it.
    """
    # One tool after another, not side by side: on 2 cores with an empty GOCACHE, helm then
    # registry took 254 s, both at once 370 s (each `go build` already keeps both cores busy, and
    # two of them compile the packages they share twice).
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    envtest = _envtest_binaries(assets) if assets else None
    names = [] if envtest else ["kubernetes", "etcd"]
    names += ["kube-controller-manager", "helm", "registry", "apiserver-adapter", "knative-eventing", "service-proxy"]
    names += ["promtool", "jaeger"]
    progress = _progress(names)
    progress.announce(cache_root())
    bins = {name: ensure(name, progress) for name in names}
    if envtest is None:
        envtest = (bins["etcd"] / "etcd", bins["kubernetes"] / "kube-apiserver", bins["kubernetes"] / "kubectl")
    etcd, apiserver, kubectl = envtest
    return Toolchain(
        etcd=etcd,
        kube_apiserver=apiserver,
        kubectl=kubectl,
        kube_controller_manager=bins["kube-controller-manager"] / "kube-controller-manager",
        helm=bins["helm"] / "helm",
        registry=bins["registry"] / "registry",
        apiserver_adapter=bins["apiserver-adapter"] / "apiserver_receive_adapter",
        knative=bins["knative-eventing"],
        knative_config=bins["knative-eventing"].parent / "config",
        promtool=bins["promtool"] / "promtool",
        jaeger=bins["jaeger"] / "jaeger",
        service_proxy=bins["service-proxy"] / "service-proxy",
    )


@dataclass(frozen=True)
class ClusterToolchain:
    """The cluster tier's binaries (testbed.cluster), on top of the fast tier's :class:`Toolchain`."""

    base: Toolchain
    kube_node: Path  # bin folder: kubelet, kube-scheduler, kube-proxy
    coredns: Path
    pause: Path
    knative_serving: Path  # bin folder: serving-controller, -webhook, -activator, -autoscaler, -queue
    knative_serving_config: Path  # serving/ (config/core), networking/ and caching/ (config/)
    knative_eventing_webhook: Path
    traefik: Path
    kube_router: Path  # the node's NetworkPolicy engine (testbed.node.policy)


CLUSTER_TOOLS = (
    "kube-node",
    "coredns",
    "pause",
    "knative-serving",
    "knative-eventing-webhook",
    "traefik",
    "kube-router",
)


def ensure_cluster() -> ClusterToolchain:
    """The fast tier's tools and the cluster tier's, built on first use (about 20 more minutes cold)."""
    base = ensure_all()
    progress = _progress(list(CLUSTER_TOOLS))
    bins = {name: ensure(name, progress) for name in CLUSTER_TOOLS}
    return ClusterToolchain(
        base=base,
        kube_node=bins["kube-node"],
        coredns=bins["coredns"] / "coredns",
        pause=bins["pause"] / "pause",
        knative_serving=bins["knative-serving"],
        knative_serving_config=bins["knative-serving"].parent / "config",
        knative_eventing_webhook=bins["knative-eventing-webhook"] / "eventing-webhook",
        traefik=bins["traefik"] / "traefik",
        kube_router=bins["kube-router"] / "kube-router",
    )


def knative_check() -> Path:
    """The Go program that runs Knative's own Validate() on our manifests."""
    return ensure("knative-check") / "knative-check"
