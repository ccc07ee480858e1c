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
  so ``controlPlane.proxy.extraSANs`` adds the ``.svc`` and ``.svc.cluster.local`` names, and the
  host of ``VCLUSTER_EXTERNAL_SERVER`` when one is set.

``ENVIRONMENT``, the tenant's names and its owner labels (``shared.model.ownership``: the Tenant
object's uid, namespace and name) become labels on the control plane StatefulSet; the owner
labels in a release's values are how install and cleanup tell whose release it is.

``serviceCIDR`` is the host's Service range (``shared.model.service_range``): without it vcluster 0.21.2
never boots on a host of Kubernetes 1.33 or later. It is left out only where no range is known
(the callers that build values for comparison, never install).

``controlPlane.distro`` is ``VCLUSTER_DISTRO`` (k3s, the original's, or k8s) for a new release; a
release keeps the distro it runs (``keep_distro``, applied by install through helm's ``keep``).

``policies`` turns on the chart's ResourceQuota, LimitRange and egress NetworkPolicies for the
tenant's namespace, with the numbers of ``shared.model.isolation`` (settings; the chart's defaults unless
set): the vCluster docs' isolated mode. tests/unit/test_values_schema.py checks the whole against
the real chart's schema; tests/integration/test_isolation_render.py that the stand-in chart renders
from them what the real one does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from shared.model.isolation import Isolation
from shared.model.ownership import legacy_release_labels, owner_labels
from shared.model.tenant import Tenant

LABEL_ENVIRONMENT = "kubeopera.io/environment"
CHART_DEFAULTS = Isolation()  # the chart's own numbers and Pod Security baseline
DISTROS = ("k3s", "k8s")  # VCLUSTER_DISTRO; k3s is the original operator's


def vcluster_values(
    tenant: Tenant,
    environment: str,
    isolation: Isolation = CHART_DEFAULTS,
    service_cidr: str = "",
    distro: str = "k3s",
    external_server: str = "",
) -> dict[str, Any]:
    """The values of ``tenant``'s release (install passes ``Settings.isolation``, the host's
    Service range, ``VCLUSTER_DISTRO`` and ``VCLUSTER_EXTERNAL_SERVER``; the default is the chart's
    own numbers, k3s and no external address)."""
    if distro not in DISTROS:
        raise ValueError(f"distro {distro!r} is not one of {DISTROS}")
    spec = tenant.spec
    names = spec.names
    quota = {"cpu": spec.quota.cpu, "memory": spec.quota.memory}
    values: dict[str, Any] = {
        "controlPlane": {
            "distro": {distro: {"enabled": True}},
            "proxy": {"extraSANs": [*names.server_names, *_host_of(names.external_server(external_server))]},
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


def _host_of(server: str) -> list[str]:
    """The host of an https:// address, as a one-item list (none for no address)."""
    host = urlparse(server).hostname if server else None
    return [host] if host else []


def distro_of(values: Mapping[str, Any]) -> str:
    """The distro a release's values turn on; the chart's default, k8s, when none is."""
    distros = (values.get("controlPlane") or {}).get("distro") or {}
    on = [name for name in DISTROS if isinstance(distros.get(name), Mapping) and distros[name].get("enabled")]
    return on[0] if on else "k8s"


def keep_distro(values: Mapping[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """``values`` with the distro of the release as it runs (``current``; None: a new release).

    A vCluster's data is its distro's (k3s's own datastore, or kube-apiserver over kine): helm
    would upgrade a release to another distro without complaint and leave an empty cluster with
    the old one's state beside it. So ``VCLUSTER_DISTRO`` chooses for new vClusters only; moving
    one is deleting its Tenant and making it again."""
    result = copy.deepcopy(dict(values))
    if current is None:
        return result
    running, wanted = distro_of(current), distro_of(values)
    if running != wanted:
        result["controlPlane"]["distro"] = {running: {"enabled": True}}
    return result
