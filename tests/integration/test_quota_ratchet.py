"""A Tenant admitted before the quota rules (or before an operator lowered the maximum) keeps
working once they apply: the functions can still write its status, add and remove its finalizer
and change the rest of its spec, because the API server ratchets a rule whose field did not
change (CRD validation ratcheting, on by default since Kubernetes 1.30, GA in 1.33). Only a new
quota must satisfy the rules.

The real kube-apiserver of the test bed, with a copy of deploy/crd/tenants.yaml under a group of
its own (so that the session's Tenant CRD is never without its rules): first as it was before the
rules (no x-kubernetes-validations and no maxLength on cpu and memory), then as shipped.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from shared.model.tenant import FINALIZER, PLURAL, VERSION
from testbed.controlplane import ControlPlane, kubectl, wait_established

from .conftest import TENANT_CRD
from .tenant_objects import Refusal, admitted, create, refusal_of, refused, tenant_body

pytestmark = pytest.mark.integration

GROUP = "ratchet.kubeopera.io"
CRD_NAME = f"{PLURAL}.{GROUP}"
OVER_MAX = {"cpu": "64", "memory": "256Gi"}
WAIT_SECONDS = 30.0


def crd_copy(*, with_rules: bool) -> dict[str, Any]:
    crd: dict[str, Any] = copy.deepcopy(yaml.safe_load(TENANT_CRD.read_text(encoding="utf-8")))
    crd["metadata"]["name"] = CRD_NAME
    crd["spec"]["group"] = GROUP
    for name in ("shortNames", "categories"):
        crd["spec"]["names"].pop(name, None)
    if not with_rules:
        quota = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["quota"]
        for field in quota["properties"].values():
            field.pop("x-kubernetes-validations")
            field.pop("maxLength")
    return crd


def apply_crd(control_plane: ControlPlane, crd: dict[str, Any]) -> None:
    kubectl(control_plane, "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(crd))
    wait_established(control_plane, f"crd/{CRD_NAME}")


def until(admission: str, probe: Any) -> None:
    """Wait until the API server serves the CRD just applied: ``probe()`` answers as ``admission``."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        answer = "refused" if isinstance(probe(), Refusal) else "admitted"
        if answer == admission:
            return
        assert time.monotonic() < deadline, f"the CRD's rules did not take effect in {WAIT_SECONDS}s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def ratchet_crd(control_plane: ControlPlane) -> Iterator[str]:
    yield GROUP
    kubectl(control_plane, "delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=false")


@pytest.fixture
def older_tenant(
    control_plane: ControlPlane, custom_objects: k8s.CustomObjectsApi, ratchet_crd: str, test_namespace: str
) -> Iterator[dict[str, Any]]:
    """A Tenant over the maximum, made under the CRD without the rules; then the rules apply."""
    probe_number = iter(range(1_000_000))

    def probe() -> dict[str, Any] | Refusal:
        body = tenant_body(f"probe-{next(probe_number)}", tenant_name="probe", group=GROUP, **OVER_MAX)
        return create(custom_objects, test_namespace, body, group=GROUP)

    apply_crd(control_plane, crd_copy(with_rules=False))
    until("admitted", probe)
    body = tenant_body("older", group=GROUP, **OVER_MAX)
    body["metadata"]["finalizers"] = [FINALIZER]
    tenant = admitted(create(custom_objects, test_namespace, body, group=GROUP))
    apply_crd(control_plane, crd_copy(with_rules=True))
    until("refused", probe)
    yield tenant
    custom_objects.patch_namespaced_custom_object(
        GROUP, VERSION, test_namespace, PLURAL, "older", {"metadata": {"finalizers": None}}
    )


def patch(api: k8s.CustomObjectsApi, namespace: str, body: dict[str, Any], *, status: bool = False) -> Any:
    call = api.patch_namespaced_custom_object_status if status else api.patch_namespaced_custom_object
    try:
        return call(GROUP, VERSION, namespace, PLURAL, "older", body)
    except ApiException as error:
        return refusal_of(error)


def test_an_older_tenant_over_the_maximum_keeps_working(
    custom_objects: k8s.CustomObjectsApi, older_tenant: dict[str, Any], test_namespace: str
) -> None:
    status = {"status": {"phase": "Provisioning", "vclusterName": "vc-older", "message": "installing"}}
    assert admitted(patch(custom_objects, test_namespace, status, status=True))["status"]["phase"] == "Provisioning"
    labelled = admitted(patch(custom_objects, test_namespace, {"metadata": {"labels": {"team": "a"}}}))
    assert labelled["metadata"]["labels"] == {"team": "a"}
    new_owner = {"spec": {"userID": "00000000-0000-4000-8000-000000000001"}}
    changed = admitted(patch(custom_objects, test_namespace, new_owner))
    assert changed["spec"]["quota"] == OVER_MAX
    assert changed["metadata"]["generation"] == 2


def test_a_new_quota_for_an_older_tenant_must_be_within_the_maximum(
    custom_objects: k8s.CustomObjectsApi, older_tenant: dict[str, Any], test_namespace: str
) -> None:
    still_over = refused(patch(custom_objects, test_namespace, {"spec": {"quota": {"cpu": "32"}}}))
    assert [c.message for c in still_over.causes] == ["Forbidden: 32 is more than 16, the maximum CPU of a Tenant"]
    lowered = admitted(patch(custom_objects, test_namespace, {"spec": {"quota": {"cpu": "8", "memory": "32Gi"}}}))
    assert lowered["spec"]["quota"] == {"cpu": "8", "memory": "32Gi"}
