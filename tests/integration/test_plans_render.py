"""A plan's values reach the vCluster's StatefulSet through the real helm CLI and the stand-in chart
(which renders these keys as the real vcluster 0.21.2 chart's ``statefulset.yaml`` and
``_persistence.tpl`` do), and a plan the real chart's schema refuses keeps install from starting.

- ``helm template`` of the values install sends for a Tenant of the example plan ``gold``
  (``deploy/examples/plans/tenant-plans.yaml``): the registry mirror is the registry of every image
  of the StatefulSet (its containers and init containers, for both distros), the storage class that
  of its claim, the nodeSelector and tolerations those of its pod;
- the same values installed by ``shared.adapters.helm`` into the real API server: the StatefulSet
  stored there has them;
- the CRD on the real API server: ``spec.plan`` defaults to ``default`` and must be a DNS label;
- ``PlanCheck`` with the adapter on the chart pulled from the test bed's registry: a plan whose key
  the real schema refuses is refused naming the plan and the key, the example's plans pass.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from shared.adapters.helm import Helm
from shared.adapters.release import ReleaseRecords
from shared.model.plans import Plan, Plans
from shared.model.tenant import Tenant
from shared.settings import Settings
from shared.steps.plans import PlanCheck, release_values
from testbed.project import CHART_DIR
from testbed.toolchain import Toolchain

from .tenant_objects import admitted, create, refused, tenant_body
from .test_isolation_render import alice, render

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "plans" / "tenant-plans.yaml"
MIRROR = "registry.internal.example.com"


def example_settings(tmp_path: Path, **changes: Any) -> Settings:
    """The settings install reads with the example ConfigMap mounted at PLANS_DIR."""
    (config_map,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text(encoding="utf-8")) if d]
    folder = tmp_path / "plans"
    folder.mkdir()
    for name, text in config_map["data"].items():
        (folder / name).write_text(text, encoding="utf-8")
    settings = Settings.from_env({"SENDER_IDENTITY": "off", "PLANS_DIR": str(folder), "SERVICE_CIDR": "10.0.0.0/24"})
    return dataclasses.replace(settings, **changes)


def gold(tenant: Tenant) -> Tenant:
    return dataclasses.replace(tenant, spec=dataclasses.replace(tenant.spec, plan="gold"))


def statefulset(text: str) -> dict[str, Any]:
    (found,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "StatefulSet"]
    return dict(found)


@pytest.mark.parametrize("distro", ["k3s", "k8s"])
def test_a_plans_mirror_storage_class_and_scheduling_reach_the_statefulset(
    toolchain: Toolchain, tmp_path: Path, distro: str
) -> None:
    settings = example_settings(tmp_path)
    plan = settings.plans.get("gold")
    plan = dataclasses.replace(plan, distro=distro)  # the example's k8s, and k3s as well
    rendered = render(toolchain, release_values(gold(alice()), settings, plan), tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    sts = statefulset(rendered.stdout)
    pod = sts["spec"]["template"]["spec"]
    images = [c["image"] for c in [*pod["initContainers"], *pod["containers"]]]
    assert len(images) == (2 if distro == "k3s" else 4)
    assert [i for i in images if not i.startswith(f"{MIRROR}/")] == []
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pod["nodeSelector"] == {"kubeopera.io/pool": "control-planes"}
    assert pod["tolerations"] == [
        {"key": "kubeopera.io/pool", "operator": "Equal", "value": "control-planes", "effect": "NoSchedule"}
    ]


def test_the_default_plan_renders_what_the_chart_does_without_plans(toolchain: Toolchain, tmp_path: Path) -> None:
    rendered = render(toolchain, release_values(alice(), example_settings(tmp_path)), tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    sts = statefulset(rendered.stdout)
    pod = sts["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert "storageClassName" not in sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert [c["image"] for c in pod["initContainers"]] == ["rancher/k3s:v1.31.1-k3s1"]  # the real render's


@pytest.fixture(scope="module")
def apps(kube_admin_kubeconfig: Path) -> Iterator[k8s.AppsV1Api]:
    api = k8s_config.new_client_from_config(config_file=str(kube_admin_kubeconfig))
    yield k8s.AppsV1Api(api)
    api.close()


def test_a_tenant_of_a_plan_installed_by_helm_runs_the_plans_values(
    custom_objects: k8s.CustomObjectsApi,
    apps: k8s.AppsV1Api,
    helm: Helm,
    tenant_crd: Path,
    test_namespace: str,
    tmp_path: Path,
) -> None:
    body = tenant_body("gold")
    body["spec"]["plan"] = "gold"
    tenant = Tenant.from_object(admitted(create(custom_objects, test_namespace, body)))
    assert tenant.spec.plan == "gold"
    release = tenant.spec.names.release
    state = helm.install_or_upgrade(release, test_namespace, release_values(tenant, example_settings(tmp_path)))
    assert (state.revision, state.status) == (1, "deployed")
    sts = apps.read_namespaced_stateful_set(release, test_namespace)
    assert sts.spec.volume_claim_templates[0].spec.storage_class_name == "fast-ssd"
    pod = sts.spec.template.spec
    assert pod.node_selector == {"kubeopera.io/pool": "control-planes"}
    images = [c.image for c in [*pod.init_containers, *pod.containers]]
    assert images and all(i.startswith(f"{MIRROR}/") for i in images)


def test_the_crd_defaults_the_plan_and_refuses_a_name_that_is_no_dns_label(
    custom_objects: k8s.CustomObjectsApi, tenant_crd: Path, test_namespace: str
) -> None:
    plain = admitted(create(custom_objects, test_namespace, tenant_body("plain")))
    assert plain["spec"]["plan"] == "default"
    body = tenant_body("bad-plan")
    body["spec"]["plan"] = "Gold_1"
    assert [c.field for c in refused(create(custom_objects, test_namespace, body)).causes] == ["spec.plan"]


def test_a_plan_the_real_schema_refuses_stops_install_naming_plan_and_key(helm: Helm, tmp_path: Path) -> None:
    typo = Plan.parse("silver", {"controlPlane": {"statefulSet": {"scheduling": {"nodeSelectr": {"a": "b"}}}}})
    settings = example_settings(tmp_path)
    refused = dataclasses.replace(settings, plans=Plans.of([*settings.plans.plans, typo]))
    check = PlanCheck(refused, helm)
    assert check.ready() is False
    assert "plan silver: controlPlane.statefulSet.scheduling.nodeSelectr: not a value of the chart" in check.refusal
    assert "plan gold" not in check.refusal and check.ready() is False
    assert PlanCheck(settings, helm).ready() is True  # the example's plans, on the same pulled chart


def test_the_schema_is_read_from_the_chart_as_given_a_folder_or_a_package(
    toolchain: Toolchain, helm_env: dict[str, str], records: ReleaseRecords, tmp_path: Path
) -> None:
    """VCLUSTER_CHART may be a path: the chart's folder, or the chart packaged (``helm package``)."""
    subprocess.run(
        [str(toolchain.helm), "package", str(CHART_DIR), "-d", str(tmp_path)], check=True, capture_output=True
    )
    (package,) = tmp_path.glob("*.tgz")
    real = yaml.safe_load((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    for ref in (CHART_DIR, package):
        adapter = Helm(str(ref), "0.21.2", tmp_path / "charts", records=records, executable=str(toolchain.helm))
        assert adapter.values_schema() == real
