"""What the cluster tier applies, as Kubernetes objects (dicts), in apply order: pure functions of
the toolchain's copies of the release configurations and of the clone; nothing here touches a
cluster.

1. :func:`coredns_manifests`: cluster DNS (``kube-dns`` at 10.0.0.10);
2. :func:`serving_manifests`: Knative Serving core (its CRDs apart: :class:`Manifests`);
3. :func:`traefik_manifests`: Traefik, Serving's KIngress implementation (in ``knative-serving``);
4. :func:`eventing_manifests`: Knative Eventing core, in-memory channel and MT channel-based
   broker, as pods (CRDs apart), with the project's feature flags
   (:func:`project_eventing_features`);
5. :func:`project_manifests`: the Tenant CRD, then ``deploy/base`` (with ``eventing/``) as
   kustomize builds it, changed only where the test bed must (CRD apart).

Each part's CRDs must be Established before its objects are applied (instances of them are among
the objects), and each part's Deployments should be Available before the next part (the next
part's objects go through the previous part's webhooks). What each part leaves out of its
release, and why, is in its module: :mod:`.serving`, :mod:`.eventing`, :mod:`.addons`,
:mod:`.overlay`; the shared pieces are in :mod:`.yamldocs`.
"""

from __future__ import annotations

from testbed.cluster.addons import coredns_manifests, traefik_manifests
from testbed.cluster.eventing import eventing_manifests
from testbed.cluster.overlay import project_eventing_features, project_manifests
from testbed.cluster.serving import serving_manifests
from testbed.cluster.yamldocs import Manifests, ReleaseError

__all__ = [
    "Manifests",
    "ReleaseError",
    "coredns_manifests",
    "eventing_manifests",
    "project_eventing_features",
    "project_manifests",
    "serving_manifests",
    "traefik_manifests",
]
