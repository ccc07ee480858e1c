"""Every quota form the CRD admits goes through the product the way install takes it: the Tenant
as the real API server stored it, ``Tenant.from_object``, ``vcluster_values``, then ``shared.adapters.helm``
on the real helm CLI with the chart from the test bed's registry. The vCluster's StatefulSet that
lands on the API server asks for exactly that quota (in the canonical form Kubernetes gives a
quantity: "1.5" is 1500m, "1.5Gi" 1536Mi), and the same Tenant installed again makes no new
revision (the values round-trip through helm unchanged, so a re-delivered event does not upgrade).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from shared.adapters.helm import Helm
from shared.model.tenant import Tenant
from shared.model.values import vcluster_values

from .tenant_objects import admitted, create, tenant_body

pytestmark = pytest.mark.integration

LONGEST_NAME = "t" + "0123456789" * 3 + "z"  # 32 characters, the longest tenantName


@pytest.fixture(scope="module")
def apps(kube_admin_kubeconfig: Path) -> Iterator[k8s.AppsV1Api]:
    api = k8s_config.new_client_from_config(config_file=str(kube_admin_kubeconfig))
    yield k8s.AppsV1Api(api)
    api.close()


@pytest.mark.parametrize(
    ("tenant_name", "cpu", "memory", "canonical"),
    [
        (LONGEST_NAME, "16", "64Gi", {"cpu": "16", "memory": "64Gi"}),  # the maximum, the longest name
        ("t0z", 16, 64 * 2**30, {"cpu": "16", "memory": "68719476736"}),  # integers; the shortest name
        ("dec", "1.5", "1e3", {"cpu": "1500m", "memory": "1e3"}),
        ("milli", "1500m", "2Ki", {"cpu": "1500m", "memory": "2Ki"}),
        ("exp", "1e1", "1.5Gi", {"cpu": "10", "memory": "1536Mi"}),
    ],
)
def test_an_admitted_quota_reaches_the_vcluster_statefulset(
    custom_objects: k8s.CustomObjectsApi,
    apps: k8s.AppsV1Api,
    helm: Helm,
    tenant_crd: Path,
    test_namespace: str,
    tenant_name: str,
    cpu: str | int,
    memory: str | int,
    canonical: dict[str, str],
) -> None:
    body = tenant_body("edge", tenant_name=tenant_name, cpu=cpu, memory=memory)
    tenant = Tenant.from_object(admitted(create(custom_objects, test_namespace, body)))
    values = vcluster_values(tenant, "test")
    release = tenant.spec.names.release

    first = helm.install_or_upgrade(release, test_namespace, values)
    assert (first.revision, first.status) == (1, "deployed")

    sts = apps.read_namespaced_stateful_set(release, test_namespace)
    (container,) = sts.spec.template.spec.containers
    for asked in (container.resources.requests, container.resources.limits):
        assert {key: asked[key] for key in canonical} == canonical

    again = helm.install_or_upgrade(release, test_namespace, vcluster_values(tenant, "test"))
    assert again.revision == 1
