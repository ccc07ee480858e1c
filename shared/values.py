"""The Helm values for a Tenant's vCluster release: pure, deterministic, comparable.

They are the original operator's defaults (spec: Helm Integration) with two deliberate changes,
both forced by the real vcluster 0.21 chart (design.md section 5):

- ``exportKubeConfig.enabled`` is not sent. The 0.21 schema has no such key and rejects unknown
  keys; the chart always writes Secret ``vc-<release>`` (key ``config``), which is what the flag
  meant in older charts.
- ``exportKubeConfig.server`` is the address where the vCluster answers inside the host cluster
  (``https://<release>.<namespace>.svc:443``, which a pod in any namespace resolves), so the stored
  kubeconfig works for in-cluster clients; the chart's default (``https://localhost:8443``) only
  works inside the vCluster pod. The chart's certificate covers only ``<release>.<namespace>``,
  so ``controlPlane.proxy.extraSANs`` adds the ``.svc`` and ``.svc.cluster.local`` names.

``ENVIRONMENT``, the tenant's names and its owner labels (``shared.ownership``: the Tenant
object's uid, namespace and name) become labels on the control plane StatefulSet; the owner
labels in a release's values are how install and cleanup tell whose release it is.

``serviceCIDR`` is the host's Service range (``shared.service_range``): without it vcluster 0.21.2
never boots on a host of Kubernetes 1.33 or later. It is left out only where no range is known
(the callers that build values for comparison, never install).

``policies`` turns on the chart's ResourceQuota, LimitRange and egress NetworkPolicies for the
tenant's namespace, with the numbers of ``shared.isolation`` (settings; the chart's defaults unless
set): the vCluster docs' isolated mode. tests/unit/test_values_schema.py checks the whole against
the real chart's schema; tests/integration/test_isolation_render.py that the stand-in chart renders
from them what the real one does.
"""

from __future__ import annotations

from typing import Any

from shared.isolation import Isolation
from shared.ownership import legacy_release_labels, owner_labels
from shared.tenant import Tenant

LABEL_ENVIRONMENT = "kubeopera.io/environment"
CHART_DEFAULTS = Isolation()  # the chart's own numbers and Pod Security baseline


def vcluster_values(
    tenant: Tenant, environment: str, isolation: Isolation = CHART_DEFAULTS, service_cidr: str = ""
) -> dict[str, Any]:
    """The values of ``tenant``'s release (install passes ``Settings.isolation`` and the host's
    Service range; the default is the chart's own numbers)."""
    spec = tenant.spec
    names = spec.names
    quota = {"cpu": spec.quota.cpu, "memory": spec.quota.memory}
    values: dict[str, Any] = {
        "controlPlane": {
            "distro": {"k3s": {"enabled": True}},
            "proxy": {"extraSANs": list(names.server_names)},
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
        "policies": isolation.helm_policies(control_plane=quota),
    }
    if service_cidr:
        values["serviceCIDR"] = service_cidr
    return values
