"""Build the test bed's real binaries once, at pinned versions, into a cache outside the clone.

Every external program the test bed and the local runner start comes from here: etcd,
kube-apiserver, kubectl and kube-controller-manager (from ``k8s.io/kubernetes`` through a wrapper
module, because that module replaces its staging modules with local paths and cannot be ``go
install``-ed; the controller manager has a cache folder of its own, so adding it did not rebuild
the others), helm (version-stamped so that ``pyhelm3.Client()`` can parse ``helm version``), an OCI
registry (distribution v3), the Knative ApiServerSource receive adapter, and Knative Eventing's
control and data plane (``knative-eventing``: controller, mtchannel_broker, broker ingress and
filter, the in-memory channel's controller and dispatcher, mtping), which also carries the
manifests the test bed applies, copied out of the module cache at build time (``ModuleCopy``):
Eventing's ``config/`` as ``config/eventing/`` and Serving's ``config/core/300-resources/`` as
``config/serving-crds/``, so nothing later reads ``GOMODCACHE``; Prometheus's ``promtool`` (built
with the ``remove_all_sd`` tag: no service discovery, which rule checks never need) and Jaeger v2's
all-in-one ``jaeger`` (the trace receiver, :mod:`testbed.jaeger`). ``KUBEBUILDER_ASSETS``, when set,
supplies ``etcd``, ``kube-apiserver`` and ``kubectl`` as envtest does.

A cold build takes a while (about 13 minutes on 2 cores before Knative Eventing, promtool and
jaeger, which add about 1, 3 and 5 minutes; see ``progress.DEFAULT_SECONDS``), so it says what it
does on stderr: what is missing and how long that usually takes, a line per tool, a progress line
every 15 s while a ``go build`` runs and the time left for everything still to build; a warm run
finds everything and builds nothing.

The modules, one concern each:

- :mod:`.versions`: the pinned versions (``VERSIONS``; nowhere else) and pinned go.sum lines;
- :mod:`.builds`: what each tool is (``BUILDS``, ``GoBuild``, ``ModuleCopy``, ``steps``);
- :mod:`.cache`: the cache folder, a tool's folder in it, the build lock;
- :mod:`.gobuild`: the wrapper module, ``go build`` per binary and the module copies;
- :mod:`.provision`: ``Toolchain``, ``ensure``, ``ensure_all``, ``ClusterToolchain``, ``ensure_cluster``
  (the cluster tier's node binaries, CoreDNS, pause, Knative Serving, Eventing's webhook, Traefik,
  and kube-router, the node's NetworkPolicy engine),
  ``knative_check``;
- :mod:`.progress`: the progress lines, estimates and ``timings.json``;
- :mod:`.cli`: ``main``, for ``python -m testbed.toolchain`` (builds everything, prints the paths).
"""

from __future__ import annotations

from testbed.toolchain.builds import BUILDS, GoBuild, ModuleCopy, steps
from testbed.toolchain.cache import cache_root
from testbed.toolchain.cli import main
from testbed.toolchain.errors import ToolchainError
from testbed.toolchain.provision import ClusterToolchain, Toolchain, ensure, ensure_all, ensure_cluster, knative_check
from testbed.toolchain.versions import (
    ETCD_VERSION,
    HELM_VERSION,
    JAEGER_MODULE_VERSION,
    JAEGER_VERSION,
    KNATIVE_EVENTING_SUMS,
    KNATIVE_EVENTING_VERSION,
    KNATIVE_SERVING_VERSION,
    KUBERNETES_VERSION,
    PROMETHEUS_MODULE_VERSION,
    PROMETHEUS_VERSION,
    REGISTRY_VERSION,
    VERSIONS,
)

__all__ = [
    "BUILDS",
    "ETCD_VERSION",
    "HELM_VERSION",
    "JAEGER_MODULE_VERSION",
    "JAEGER_VERSION",
    "KNATIVE_EVENTING_SUMS",
    "KNATIVE_EVENTING_VERSION",
    "KNATIVE_SERVING_VERSION",
    "KUBERNETES_VERSION",
    "PROMETHEUS_MODULE_VERSION",
    "PROMETHEUS_VERSION",
    "REGISTRY_VERSION",
    "VERSIONS",
    "ClusterToolchain",
    "GoBuild",
    "ModuleCopy",
    "Toolchain",
    "ToolchainError",
    "cache_root",
    "ensure",
    "ensure_all",
    "ensure_cluster",
    "knative_check",
    "main",
    "steps",
]
