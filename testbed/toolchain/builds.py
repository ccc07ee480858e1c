"""What each tool is: the Go wrapper module it is built from, its binaries, and what it carries.

``BUILDS`` maps a tool's name (its cache folder's prefix) to a :class:`GoBuild`: the modules it
requires at the pinned versions (:mod:`.versions`), the binaries and their Go packages, the
ldflags that stamp versions, build tags, and the module folders copied into the tool folder at
build time (:class:`ModuleCopy`). k8s.io/kubernetes cannot be ``go install``-ed (it replaces its staging
modules with local paths), so its wrapper module mirrors those replaces. ``steps`` turns a tool into
its ``go build`` invocations, one per binary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from testbed.toolchain.progress import Step
from testbed.toolchain.versions import (
    COREDNS_VERSION,
    ETCD_VERSION,
    HELM_VERSION,
    JAEGER_MODULE_VERSION,
    JAEGER_VERSION,
    KNATIVE_CACHING_MODULE_VERSION,
    KNATIVE_EVENTING_SUMS,
    KNATIVE_EVENTING_VERSION,
    KNATIVE_NETWORKING_MODULE_VERSION,
    KNATIVE_SERVING_VERSION,
    KUBE_ROUTER_VERSION,
    KUBERNETES_VERSION,
    PROMETHEUS_MODULE_VERSION,
    PROMETHEUS_VERSION,
    REGISTRY_VERSION,
    TRAEFIK_VERSION,
)

# The clone's tools/ folder (testbed/toolchain/builds.py -> <clone>/tools): Go programs of our own.
TOOLS_SRC = Path(__file__).resolve().parent.parent.parent / "tools"


@dataclass(frozen=True)
class ModuleCopy:
    """A folder of a Go module, copied out of the module cache into a tool folder at build time.

    ``dest`` is relative to the tool folder. The copy is ordinary, writable files, so nothing that
    uses the tool reads ``GOMODCACHE`` (which may be elsewhere, pruned, or read-only).
    """

    module: str
    version: str
    subdir: str  # inside the module; "" for the whole module
    dest: str


@dataclass(frozen=True)
class GoBuild:
    """One Go wrapper module and the binaries built from it (and module folders it carries)."""

    name: str
    version: str
    requires: tuple[tuple[str, str], ...]
    packages: tuple[tuple[str, str], ...]  # (binary name, Go package)
    ldflags: str = ""
    replace_staging_of: str | None = None  # module whose k8s.io staging replaces we mirror
    source_dir: Path | None = None  # a main package of our own (copied into the module)
    sums: tuple[str, ...] = ()  # go.sum lines pinned here (see KNATIVE_EVENTING_SUMS)
    copies: tuple[ModuleCopy, ...] = ()
    tags: tuple[str, ...] = ()  # Go build tags (`go build -tags a,b`)
    directives: tuple[str, ...] = ()  # go.mod lines copied from the built module (replace, exclude)

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(binary for binary, _ in self.packages)


def _k8s_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.gitCommit=0000000000000000000000000000000000000000",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def _helm_ldflags(version: str) -> str:
    return " ".join(
        [
            f"-X helm.sh/helm/v3/internal/version.version={version}",
            "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
            "-X helm.sh/helm/v3/internal/version.metadata=",
        ]
    )


def _prometheus_ldflags(version: str) -> str:
    return f"-X github.com/prometheus/common/version.Version={version.lstrip('v')}"


def _kube_router_ldflags(version: str) -> str:
    package = "github.com/cloudnativelabs/kube-router/v2/pkg/version"
    return f"-X {package}.Version={version} -X {package}.BuildDate=1970-01-01T00:00:00Z"


def _jaeger_ldflags(version: str) -> str:
    return f"-X github.com/jaegertracing/jaeger/internal/version.latestVersion={version}"


BUILDS: Mapping[str, GoBuild] = {
    "kubernetes": GoBuild(
        name="kubernetes",
        version=KUBERNETES_VERSION,
        requires=(("k8s.io/kubernetes", KUBERNETES_VERSION),),
        packages=(
            ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
            ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
        ),
        ldflags=_k8s_ldflags(KUBERNETES_VERSION),
        replace_staging_of="k8s.io/kubernetes",
    ),
    # Same module and version as "kubernetes", but its own entry (and cache folder): caches that
    # already hold kube-apiserver and kubectl keep them.
    "kube-controller-manager": GoBuild(
        name="kube-controller-manager",
        version=KUBERNETES_VERSION,
        requires=(("k8s.io/kubernetes", KUBERNETES_VERSION),),
        packages=(("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),),
        ldflags=_k8s_ldflags(KUBERNETES_VERSION),
        replace_staging_of="k8s.io/kubernetes",
    ),
    "etcd": GoBuild(
        name="etcd",
        version=ETCD_VERSION,
        requires=(("go.etcd.io/etcd/server/v3", ETCD_VERSION),),
        packages=(("etcd", "go.etcd.io/etcd/server/v3"),),
    ),
    "helm": GoBuild(
        name="helm",
        version=HELM_VERSION,
        requires=(("helm.sh/helm/v3", HELM_VERSION),),
        packages=(("helm", "helm.sh/helm/v3/cmd/helm"),),
        ldflags=_helm_ldflags(HELM_VERSION),
    ),
    "registry": GoBuild(
        name="registry",
        version=REGISTRY_VERSION,
        requires=(("github.com/distribution/distribution/v3", REGISTRY_VERSION),),
        packages=(("registry", "github.com/distribution/distribution/v3/cmd/registry"),),
    ),
    "apiserver-adapter": GoBuild(
        name="apiserver-adapter",
        version=KNATIVE_EVENTING_VERSION,
        requires=(("knative.dev/eventing", KNATIVE_EVENTING_VERSION),),
        packages=(("apiserver_receive_adapter", "knative.dev/eventing/cmd/apiserver_receive_adapter"),),
        sums=KNATIVE_EVENTING_SUMS,
    ),
    # Knative Eventing's control and data plane (unmodified upstream mains), the same module as the
    # adapter: the two pinned go.sum lines are enough, `-mod=mod` fills in the rest from
    # sum.golang.org (the result equals a full go.sum line for line). It carries the manifests the
    # test bed applies: Eventing's config/ and Serving's CRDs.
    "knative-eventing": GoBuild(
        name="knative-eventing",
        version=KNATIVE_EVENTING_VERSION,
        requires=(("knative.dev/eventing", KNATIVE_EVENTING_VERSION),),
        packages=(
            ("controller", "knative.dev/eventing/cmd/controller"),
            ("mtchannel_broker", "knative.dev/eventing/cmd/mtchannel_broker"),
            ("broker_ingress", "knative.dev/eventing/cmd/broker/ingress"),
            ("broker_filter", "knative.dev/eventing/cmd/broker/filter"),
            ("in_memory_channel_controller", "knative.dev/eventing/cmd/in_memory/channel_controller"),
            ("in_memory_channel_dispatcher", "knative.dev/eventing/cmd/in_memory/channel_dispatcher"),
            ("mtping", "knative.dev/eventing/cmd/mtping"),
        ),
        sums=KNATIVE_EVENTING_SUMS,
        copies=(
            ModuleCopy("knative.dev/eventing", KNATIVE_EVENTING_VERSION, "config", "config/eventing"),
            ModuleCopy(
                "knative.dev/serving", KNATIVE_SERVING_VERSION, "config/core/300-resources", "config/serving-crds"
            ),
        ),
    ),
    "knative-check": GoBuild(
        name="knative-check",
        version=f"{KNATIVE_EVENTING_VERSION}-{KNATIVE_SERVING_VERSION}",
        requires=(
            ("knative.dev/eventing", KNATIVE_EVENTING_VERSION),
            ("knative.dev/serving", KNATIVE_SERVING_VERSION),
        ),
        packages=(("knative-check", "."),),
        source_dir=TOOLS_SRC / "knative-check",
        sums=KNATIVE_EVENTING_SUMS,
    ),
    # The local tier's cluster DNS and kube-proxy stand-in (testbed.standins.service_proxy drives
    # it): a Go program of ours, the standard library only.
    "service-proxy": GoBuild(
        name="service-proxy",
        version="1",
        requires=(),
        packages=(("service-proxy", "."),),
        source_dir=TOOLS_SRC / "service-proxy",
    ),
    # promtool checks and unit-tests the alert rules. `remove_all_sd` leaves out Prometheus's
    # service discovery plugins (cloud SDKs), which promtool's rule checks never use: 54 MB instead
    # of 88 MB, and about half the build time (2 cores, empty Go cache: 2.3-2.9 minutes, not 5.7).
    "promtool": GoBuild(
        name="promtool",
        version=PROMETHEUS_VERSION,
        requires=(("github.com/prometheus/prometheus", PROMETHEUS_MODULE_VERSION),),
        packages=(("promtool", "github.com/prometheus/prometheus/cmd/promtool"),),
        ldflags=_prometheus_ldflags(PROMETHEUS_VERSION),
        tags=("remove_all_sd",),
    ),
    # Jaeger v2's all-in-one (an OpenTelemetry Collector with Jaeger's storage and query API), the
    # test bed's trace receiver (testbed/jaeger.py). Its go.mod's `replace github.com/Shopify/sarama`
    # does not apply in a wrapper module; the Kafka code it concerns is unused with memory storage.
    "jaeger": GoBuild(
        name="jaeger",
        version=JAEGER_VERSION,
        requires=(("github.com/jaegertracing/jaeger", JAEGER_MODULE_VERSION),),
        packages=(("jaeger", "github.com/jaegertracing/jaeger/cmd/jaeger"),),
        ldflags=_jaeger_ldflags(JAEGER_VERSION),
    ),
    # --- the cluster tier (testbed.cluster): a real node, Knative Serving and its ingress -------
    "kube-node": GoBuild(
        name="kube-node",
        version=KUBERNETES_VERSION,
        requires=(("k8s.io/kubernetes", KUBERNETES_VERSION),),
        packages=(
            ("kubelet", "k8s.io/kubernetes/cmd/kubelet"),
            ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
            ("kube-proxy", "k8s.io/kubernetes/cmd/kube-proxy"),
        ),
        ldflags=_k8s_ldflags(KUBERNETES_VERSION),
        replace_staging_of="k8s.io/kubernetes",
    ),
    "coredns": GoBuild(
        name="coredns",
        version=COREDNS_VERSION,
        requires=(("github.com/coredns/coredns", COREDNS_VERSION),),
        packages=(("coredns", "github.com/coredns/coredns"),),
    ),
    # The pod sandbox's process: a Go program of ours (tools/pause), no registry needed.
    "pause": GoBuild(
        name="pause",
        version="1",
        requires=(),
        packages=(("pause", "."),),
        source_dir=TOOLS_SRC / "pause",
    ),
    # Knative Serving's control plane and queue-proxy (unmodified upstream mains; the binaries are
    # named serving-<cmd>, as a binary's name is unique across tools) and the release
    # manifests they come with: Serving's config/core, and the CRDs its release takes from
    # knative.dev/networking (KIngress, Certificate, ServerlessService) and knative.dev/caching (Image).
    "knative-serving": GoBuild(
        name="knative-serving",
        version=KNATIVE_SERVING_VERSION,
        requires=(("knative.dev/serving", KNATIVE_SERVING_VERSION),),
        packages=(
            ("serving-controller", "knative.dev/serving/cmd/controller"),
            ("serving-webhook", "knative.dev/serving/cmd/webhook"),
            ("serving-activator", "knative.dev/serving/cmd/activator"),
            ("serving-autoscaler", "knative.dev/serving/cmd/autoscaler"),
            ("serving-queue", "knative.dev/serving/cmd/queue"),
        ),
        copies=(
            ModuleCopy("knative.dev/serving", KNATIVE_SERVING_VERSION, "config/core", "config/serving"),
            ModuleCopy("knative.dev/networking", KNATIVE_NETWORKING_MODULE_VERSION, "config", "config/networking"),
            ModuleCopy("knative.dev/caching", KNATIVE_CACHING_MODULE_VERSION, "config", "config/caching"),
        ),
    ),
    # Knative Eventing's admission webhook, which the fast tier does without: in the cluster tier
    # Eventing runs from its release configuration, webhook included. Its own entry, so that caches
    # holding "knative-eventing" keep it.
    "knative-eventing-webhook": GoBuild(
        name="knative-eventing-webhook",
        version=KNATIVE_EVENTING_VERSION,
        requires=(("knative.dev/eventing", KNATIVE_EVENTING_VERSION),),
        packages=(("eventing-webhook", "knative.dev/eventing/cmd/webhook"),),
        sums=KNATIVE_EVENTING_SUMS,
    ),
    # Traefik v3.6 implements Knative's KIngress itself (its experimental Knative provider): the
    # ingress of the cluster tier, pure Go. The directives are v3.6.12's own go.mod's, which a
    # wrapper module must repeat (replaces of a dependency do not apply to its dependents).
    "traefik": GoBuild(
        name="traefik",
        version=TRAEFIK_VERSION,
        requires=(("github.com/traefik/traefik/v3", TRAEFIK_VERSION),),
        packages=(("traefik", "github.com/traefik/traefik/v3/cmd/traefik"),),
        directives=(
            "replace github.com/abbot/go-http-auth => "
            "github.com/containous/go-http-auth v0.4.1-0.20200324110947-a37a7636d23e",
            "replace github.com/gorilla/mux => github.com/containous/mux v0.0.0-20250523120546-41b6ec3aed59",
            "replace github.com/mailgun/minheap => github.com/containous/minheap v0.0.0-20190809180810-6e71eb837595",
            "exclude github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible",
        ),
    ),
    # The node's NetworkPolicy engine: kube-router, of which the node runs only the firewall
    # controller (--run-firewall; no BGP routing, no service proxy): iptables and ipset rules from
    # the NetworkPolicies, on the node as a process (testbed.node.policy). Pure Go (it runs the
    # iptables and ipset commands).
    "kube-router": GoBuild(
        name="kube-router",
        version=KUBE_ROUTER_VERSION,
        requires=(("github.com/cloudnativelabs/kube-router/v2", KUBE_ROUTER_VERSION),),
        packages=(("kube-router", "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"),),
        ldflags=_kube_router_ldflags(KUBE_ROUTER_VERSION),
    ),
}


def steps(build: GoBuild) -> tuple[Step, ...]:
    """The `go build` invocations of a tool, one per binary.

    Not one `go build -o DIR pkg...` for a tool's several binaries: measured for Knative Eventing's
    seven after the adapter (2 cores, empty GOCACHE), it was not faster (67 s vs 59 s one by one;
    on a loaded machine 316 s and 375 s vs 391 s and 311 s, the same CPU time), since each binary
    after the first reuses the first one's compiled packages anyway; one by one gives per-binary
    timings and progress.
    """
    return tuple(Step(build.name, binary) for binary in build.binaries)
