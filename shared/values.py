"""The Helm values for a Tenant's vCluster release: pure, deterministic, comparable.

They are the original operator's defaults (spec: Helm Integration) with two deliberate changes,
both forced by the real vcluster 0.21 chart (design.md section 5):

- ``exportKubeConfig.enabled`` is not sent. The 0.21 schema has no such key and rejects unknown
  keys; the chart always writes Secret ``vc-<release>`` (key ``config``), which is what the flag
  meant in older charts.
- ``exportKubeConfig.server`` is the address where the vCluster answers inside the host cluster
  (``https://<release>.<namespace>:443``), so the stored kubeconfig works for in-cluster clients;
  the chart's default (``https://localhost:8443``) only works inside the vCluster pod.

``ENVIRONMENT`` and the tenant's identity become labels on the control plane StatefulSet.
"""

from __future__ import annotations

from typing import Any

from shared.tenant import TenantSpec

LABEL_ENVIRONMENT = "kubeopera.io/environment"


def vcluster_values(spec: TenantSpec, environment: str) -> dict[str, Any]:
    names = spec.names
    quota = {"cpu": spec.quota.cpu, "memory": spec.quota.memory}
    return {
        "controlPlane": {
            "distro": {"k3s": {"enabled": True}},
            "statefulSet": {
                "resources": {"requests": dict(quota), "limits": dict(quota)},
                "labels": {
                    LABEL_ENVIRONMENT: environment,
                    "kubeopera.io/tenant": names.tenant_name,
                    "kubeopera.io/tenant-id": names.cloud_space_id,
                },
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
