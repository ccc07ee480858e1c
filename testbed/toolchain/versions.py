"""The pinned versions of the test bed's tools: they live here and nowhere else.

``VERSIONS`` is what ``python -m testbed.toolchain`` prints (releases; ``*_MODULE_VERSION`` is the
Go module version a release is published as, where the two differ); ``KNATIVE_EVENTING_SUMS`` are the
go.sum lines of Knative Eventing that the checksum database cannot give.
"""

from __future__ import annotations

from collections.abc import Mapping

KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.16"
HELM_VERSION = "v3.16.4"
REGISTRY_VERSION = "v3.0.0"
KNATIVE_EVENTING_VERSION = "v0.48.0"
KNATIVE_SERVING_VERSION = "v0.48.0"
# Prometheus 3.x and Jaeger v2 publish their Go modules under other version numbers than their
# releases: github.com/prometheus/prometheus v0.316.0 is Prometheus 3.16.0, and
# github.com/jaegertracing/jaeger v1.76.0 is Jaeger v1.76.0 / v2.13.0 (one tag, both lines; the
# v2 all-in-one is cmd/jaeger). The release is what we print and name the tool folder by.
PROMETHEUS_VERSION = "v3.16.0"
PROMETHEUS_MODULE_VERSION = "v0.316.0"
JAEGER_VERSION = "v2.13.0"
JAEGER_MODULE_VERSION = "v1.76.0"
# The cluster tier (testbed.cluster): a real node and Knative Serving with Traefik as its ingress.
# knative.dev/networking and knative.dev/caching are the versions serving v0.48.0's go.mod requires:
# their CRDs (KIngress, Certificate, ServerlessService, Image) are part of Serving's release.
COREDNS_VERSION = "v1.14.7"
TRAEFIK_VERSION = "v3.6.12"
KNATIVE_NETWORKING_MODULE_VERSION = "v0.0.0-20260120131110-a7cdca238a0d"
KNATIVE_CACHING_MODULE_VERSION = "v0.0.0-20260120130310-f1fc03b7f5ee"
# The node's NetworkPolicy engine (testbed.node.policy): kube-router's firewall controller alone.
# SIG Network's kube-network-policies (v0.8.0) cannot run on this machine's kernel: it diverts new
# connections with nftables' native `queue` expression, and the kernel is built without
# CONFIG_NFT_QUEUE (docs/design-notes.md). Security reports exist for kube-router v2.1.0: see there.
KUBE_ROUTER_VERSION = "v2.1.0"

VERSIONS: Mapping[str, str] = {
    "kubernetes": KUBERNETES_VERSION,
    "etcd": ETCD_VERSION,
    "helm": HELM_VERSION,
    "registry": REGISTRY_VERSION,
    "knative-eventing": KNATIVE_EVENTING_VERSION,
    "knative-serving": KNATIVE_SERVING_VERSION,
    "promtool": PROMETHEUS_VERSION,
    "jaeger": JAEGER_VERSION,
    "coredns": COREDNS_VERSION,
    "traefik": TRAEFIK_VERSION,
    "kube-router": KUBE_ROUTER_VERSION,
}

# The checksum database answers 404 for knative.dev/eventing@v0.48.0, which the proxy serves;
# pinning its hashes here keeps checksum verification on (no GONOSUMDB) and the build offline-safe.
KNATIVE_EVENTING_SUMS = (
    "knative.dev/eventing v0.48.0 h1:jBwRXnhhfJ4S5EfBSgkhJzqtcfOIr8kfG1qoaXX56KA=",
    "knative.dev/eventing v0.48.0/go.mod h1:QcPwZqLMwN1hyDXRdCCt7GCR2R+4cDULGoJf1LKuGEE=",
)
