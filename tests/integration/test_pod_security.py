"""Pod Security on a tenant's host namespace, on the test bed's real kube-apiserver (its
PodSecurity admission needs no kubelet): playing the tenant's side with the identity of its
vCluster's syncer, ``system:serviceaccount:vcluster-<t>:vc-vc-<t>``, holding exactly the Role the
real vcluster 0.21.2 chart gives it (taken from testbed/reference/vcluster-0.21.2/
rendered-isolated.yaml), whatever it may create there a tenant can cause through its vCluster.

In a namespace made the way install makes it (``Kube.create_namespace`` with the owner labels and
``Settings.isolation.pod_security_labels()``), a privileged pod with hostPID, hostNetwork and the
host's ``/`` mounted is refused; a pod shaped like the vCluster's own StatefulSet pod (root,
``allowPrivilegeEscalation: false``) is admitted, with the ``restricted`` warning. In a namespace
without the labels the same RBAC admits the privileged pod: the labels are what refuses it.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.adapters.kube import Kube
from shared.model.ownership import namespace_labels
from shared.model.tenant import Tenant
from shared.settings import Settings
from testbed.controlplane import ControlPlane, as_syncer, delete_namespace, kubectl

from .tenant_objects import tenant_body

pytestmark = pytest.mark.integration

REFERENCE = Path(__file__).resolve().parents[2] / "testbed" / "reference" / "vcluster-0.21.2" / "rendered-isolated.yaml"
SETTINGS = Settings.from_env({"SENDER_IDENTITY": "off"})


def real_chart(kind: str, tenant_name: str, name: str = "vc-vc-{t}") -> dict[str, Any]:
    """The real chart's ``kind`` named ``name`` for release vc-<tenant_name> (rendered for alice)."""
    text = REFERENCE.read_text(encoding="utf-8")
    text = text.replace("vcluster-alice", f"vcluster-{tenant_name}").replace("vc-alice", f"vc-{tenant_name}")
    wanted = name.format(t=tenant_name)
    (found,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == kind and d["metadata"]["name"] == wanted]
    return dict(found)


def privileged_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "hostPID": True,
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "root-on-the-node",
                    "image": "busybox",
                    "command": ["sleep", "infinity"],
                    "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                }
            ],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        },
    }


def vcluster_pod(tenant_name: str) -> dict[str, Any]:
    """The pod the StatefulSet controller would make from the real chart's StatefulSet."""
    sts = real_chart("StatefulSet", tenant_name, "vc-{t}")
    template = copy.deepcopy(sts["spec"]["template"])
    claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    template["spec"]["volumes"].append(
        {"name": claim, "persistentVolumeClaim": {"claimName": f"{claim}-{sts['metadata']['name']}-0"}}
    )
    template["spec"]["automountServiceAccountToken"] = False
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{sts['metadata']['name']}-0", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }


@pytest.fixture
def tenant_namespace(control_plane: ControlPlane, kube_admin_kubeconfig: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A Tenant's namespace as install makes it, the real chart's Role bound to the syncer's
    ServiceAccount in it; yields the tenantName and the namespace's labels."""
    tenant_name = f"psa-{secrets.token_hex(3)}"
    body = tenant_body("psa", tenant_name=tenant_name)
    body["metadata"] |= {"namespace": SETTINGS.tenant_namespace, "uid": "uid-psa", "generation": 1}
    tenant = Tenant.from_object(body)
    labels = namespace_labels(tenant) | SETTINGS.isolation.pod_security_labels()
    kube = Kube.connect(kube_admin_kubeconfig)
    try:
        assert kube.create_namespace(tenant.spec.names.namespace, labels)
    finally:
        kube.close()
    try:
        grant_syncer(control_plane, tenant_name)
        yield tenant_name, labels
    finally:
        delete_namespace(control_plane, f"vcluster-{tenant_name}")


def grant_syncer(control_plane: ControlPlane, tenant_name: str) -> None:
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    docs = [real_chart("ServiceAccount", tenant_name), sa, real_chart("Role", tenant_name)]
    docs.append(real_chart("RoleBinding", tenant_name))
    kubectl(control_plane, "apply", "-n", f"vcluster-{tenant_name}", "-f", "-", input=yaml.safe_dump_all(docs))


def create_as_syncer(control_plane: ControlPlane, tenant_name: str, pod: dict[str, Any], *extra: str) -> Any:
    return kubectl(
        control_plane,
        *as_syncer(tenant_name),
        "create",
        "-n",
        f"vcluster-{tenant_name}",
        *extra,
        "-f",
        "-",
        input=yaml.safe_dump(pod),
        check=False,
    )


def test_install_labels_the_namespace_baseline_enforced_restricted_reported(
    tenant_namespace: tuple[str, dict[str, str]],
) -> None:
    _, labels = tenant_namespace
    assert {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")} == {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    }


def test_the_syncer_cannot_make_a_privileged_pod_with_the_hosts_root(
    control_plane: ControlPlane, tenant_namespace: tuple[str, dict[str, str]]
) -> None:
    tenant_name, _ = tenant_namespace
    can = kubectl(control_plane, *as_syncer(tenant_name), "auth", "can-i", "create", "pods", "-n",
                  f"vcluster-{tenant_name}", check=False)  # fmt: skip
    assert can.stdout.strip() == "yes", "the chart's Role lets the syncer create pods"

    refused = create_as_syncer(control_plane, tenant_name, privileged_pod("escape"))

    assert refused.returncode != 0
    assert 'pods "escape" is forbidden: violates PodSecurity "baseline:latest"' in refused.stderr, refused.stderr
    for rule in ("host namespaces (hostNetwork=true, hostPID=true)", 'hostPath volumes (volume "host")', "privileged"):
        assert rule in refused.stderr, refused.stderr
    gone = kubectl(control_plane, "get", "pod", "escape", "-n", f"vcluster-{tenant_name}", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_the_vcluster_pod_itself_is_admitted_with_the_restricted_warning(
    control_plane: ControlPlane, tenant_namespace: tuple[str, dict[str, str]]
) -> None:
    tenant_name, _ = tenant_namespace
    pod = vcluster_pod(tenant_name)
    container = pod["spec"]["containers"][0]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "runAsGroup": 0, "runAsUser": 0}

    admitted = create_as_syncer(control_plane, tenant_name, pod)

    assert admitted.returncode == 0, admitted.stderr
    assert 'would violate PodSecurity "restricted:latest"' in admitted.stderr, admitted.stderr


def test_without_the_labels_the_same_rights_admit_the_privileged_pod(control_plane: ControlPlane) -> None:
    """The control: RBAC alone lets the syncer make it; only the namespace's labels refuse it."""
    tenant_name = f"nopsa-{secrets.token_hex(3)}"
    kubectl(control_plane, "create", "namespace", f"vcluster-{tenant_name}")
    try:
        grant_syncer(control_plane, tenant_name)
        admitted = create_as_syncer(control_plane, tenant_name, privileged_pod("escape"), "--dry-run=server")
        assert admitted.returncode == 0, admitted.stderr
    finally:
        delete_namespace(control_plane, f"vcluster-{tenant_name}")
