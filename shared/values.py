"""The Helm values for a Tenant's vCluster release: pure, deterministic, comparable.

They are the original operator's defaults (spec: Helm Integration) with two deliberate changes,
both forced by the real vcluster 0.21 chart (design.md section 5):

- ``exportKubeConfig.enabled`` is not sent. The 0.21 schema has no such key and rejects unknown
  keys; the chart always writes Secret ``vc-<release>`` (key ``config``), which is what the flag
  meant in older charts.
- ``exportKubeConfig.server`` is the address where the vCluster answers inside the host cluster
  (``https://<release>.<namespace>:443``), so the stored kubeconfig works for in-cluster clients;
  the chart's default (``https://localhost:8443``) only works inside the vCluster pod.

``ENVIRONMENT``, the tenant's names and its owner labels (``shared.ownership``: the Tenant
object's uid, namespace and name) become labels on the control plane StatefulSet; the owner
labels in a release's values are how install and cleanup tell whose release it is.
"""

from __future__ import annotations

from typing import Any

from shared.ownership import legacy_release_labels, owner_labels
from shared.tenant import Tenant

LABEL_ENVIRONMENT = "kubeopera.io/environment"


def vcluster_values(tenant: Tenant, environment: str) -> dict[str, Any]:
    spec = tenant.spec
    names = spec.names
    quota = {"cpu": spec.quota.cpu, "memory": spec.quota.memory}
    return {
        "controlPlane": {
            "distro": {"k3s": {"enabled": True}},
            "statefulSet": {
                "resources": {"requests": dict(quota), "limits": dict(quota)},
                "labels": {LABEL_ENVIRONMENT: environment} | legacy_release_labels(tenant) | owner_labels(tenant),
            },
        },
        "sync": {
            "toHost": {
                "ingresses": {"enabled": True},
                "serviceAccounts": {"enabled": True},
            }
        },
        "exportKubeConfig": {"server": names.in_cluster_server},
    }
