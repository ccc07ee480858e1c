"""deploy/base/policy/tenant-helm-records.yaml on the test bed's real kube-apiserver: helm's release
records in vcluster-* are written by tenant-install and tenant-cleanup only (issue 23, item 3).

Playing the tenant's side as in test_pod_security.py: the identity of its vCluster's syncer,
``system:serviceaccount:vcluster-<t>:vc-vc-<t>``, holding exactly the Role the real vcluster
0.21.2 chart gives it (create, update, patch, delete of Secrets among the rest). It cannot create
a copy of its release's record (type helm.sh/release.v1, labels owner=helm, name=vc-<t>,
version=99), nor a plain Secret labelled owner=helm, nor turn its own Secret into one, nor change
or delete a record install made; an ordinary Secret it may still create. tenant-install may
create a record and tenant-cleanup delete it; a person with system:masters is refused too. And
deleting the namespace (the namespace controller deletes each Secret in it, helm's records
included) still finishes.

The policy is applied as shipped; its binding, in this test only, gets a namespaceSelector that
confines it to the namespace the test makes, since other tests of the session write helm's
records in vcluster-* namespaces as admin. Everything is removed afterwards.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.adapters.release import RECORD_TYPE
from shared.model.naming import LABEL_MANAGED_BY, MANAGED_BY
from testbed.controlplane import ControlPlane, as_syncer, create_namespace, delete_namespace, kubectl

from .test_pod_security import grant_syncer

pytestmark = pytest.mark.integration

POLICY = Path(__file__).resolve().parents[2] / "deploy" / "base" / "policy" / "tenant-helm-records.yaml"
SCOPE_LABEL = "kubeopera.io/test-helm-records"
INSTALL = "system:serviceaccount:kubeopera-system:tenant-install"
CLEANUP = "system:serviceaccount:kubeopera-system:tenant-cleanup"
DENIED = (
    "helm release records (Secrets of type helm.sh/release.v1 or labelled owner=helm) in vcluster-* namespaces "
    "are written only by tenant-install and tenant-cleanup"
)
IN_FORCE_WITHIN = 30.0  # seconds: a new policy takes effect within a moment


def function(identity: str) -> list[str]:
    """kubectl's flags to act as one of the functions' ServiceAccounts."""
    return [
        f"--as={identity}",
        "--as-group=system:serviceaccounts",
        "--as-group=system:serviceaccounts:kubeopera-system",
        "--as-group=system:authenticated",
    ]


def secret(name: str, tenant_name: str, type_: str = "Opaque", labels: dict[str, str] | None = None) -> str:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": type_,
        "metadata": {"name": name, "namespace": f"vcluster-{tenant_name}", "labels": labels or {}},
        "data": {"release": base64.b64encode(b"H4sIAAAAAAAA/forged").decode()},
    }
    return yaml.safe_dump(body)


def record(name: str, tenant_name: str, version: str = "99") -> str:
    """A copy of the release's record, as issue 23 forged it: helm's type and labels."""
    labels = {"owner": "helm", "name": f"vc-{tenant_name}", "version": version, "status": "deployed"}
    return secret(name, tenant_name, RECORD_TYPE, labels)


def as_(cp: ControlPlane, who: list[str], *args: str, stdin: str | None = None) -> Any:
    return kubectl(cp, *who, *args, input=stdin, check=False)


@pytest.fixture
def tenant_name(control_plane: ControlPlane) -> Iterator[str]:
    """vcluster-<t> with the real chart's Role bound to the syncer's ServiceAccount (and, standing
    in for their ClusterRoles, to tenant-install and tenant-cleanup), and the policy in force."""
    # a letter first: hex digits alone can read as a number in YAML ("3e5870" is a float to
    # kubectl), and a label value must be a string (one CI run failed on exactly that)
    token = f"t{secrets.token_hex(3)}"
    name = f"hr-{token}"
    namespace = f"vcluster-{name}"
    docs = [d for d in yaml.safe_load_all(POLICY.read_text(encoding="utf-8")) if d]
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert "matchResources" not in binding["spec"], "the shipped binding applies to every namespace"
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {SCOPE_LABEL: token}}}
    # labelled as install labels the namespaces it makes: the policy takes only those
    create_namespace(control_plane, namespace, {SCOPE_LABEL: token, LABEL_MANAGED_BY: MANAGED_BY})
    functions_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "functions", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"vc-vc-{name}"},
        "subjects": [
            {"kind": "ServiceAccount", "name": who.rsplit(":", 1)[1], "namespace": "kubeopera-system"}
            for who in (INSTALL, CLEANUP)
        ],
    }
    try:
        grant_syncer(control_plane, name)
        kubectl(control_plane, "apply", "-f", "-", input=yaml.safe_dump_all([functions_binding, *docs]))
        yield name
    finally:
        for doc in docs:
            kind = doc["kind"].lower()
            kubectl(control_plane, "delete", kind, doc["metadata"]["name"], "--ignore-not-found", check=False)
        delete_namespace(control_plane, namespace)


def refused_once_in_force(cp: ControlPlane, tenant_name: str) -> Any:
    """The syncer's forged record, created until the policy refuses it (a new policy takes a
    moment to be in force); one admitted before that is removed again, as tenant-cleanup."""
    namespace = f"vcluster-{tenant_name}"
    deadline = time.monotonic() + IN_FORCE_WITHIN
    while True:
        made = as_(cp, as_syncer(tenant_name), "create", "-f", "-", stdin=record("vc-history", tenant_name))
        if made.returncode != 0 or time.monotonic() > deadline:
            return made
        as_(cp, function(CLEANUP), "delete", "secret", "vc-history", "-n", namespace)
        time.sleep(0.5)


def test_only_install_and_cleanup_write_helm_records(control_plane: ControlPlane, tenant_name: str) -> None:
    cp, namespace, tenant = control_plane, f"vcluster-{tenant_name}", as_syncer(tenant_name)
    me = f"system:serviceaccount:{namespace}:vc-vc-{tenant_name}"
    # The chart's Role lets the syncer create Secrets there ...
    can = as_(cp, tenant, "auth", "can-i", "create", "secrets", "-n", namespace)
    assert can.stdout.strip() == "yes", can.stdout + can.stderr

    # ... but not a copy of its release's record.
    forged = refused_once_in_force(cp, tenant_name)
    assert forged.returncode != 0 and DENIED in forged.stderr, forged.stdout + forged.stderr
    assert f"create of Secret vc-history in namespace {namespace} by {me} refused" in forged.stderr
    # Nor one under the name helm would give it, nor a plain Secret with helm's label.
    named = as_(cp, tenant, "create", "-f", "-", stdin=record(f"sh.helm.release.v1.vc-{tenant_name}.v99", tenant_name))
    assert named.returncode != 0 and DENIED in named.stderr, named.stderr
    labelled = as_(cp, tenant, "create", "-f", "-", stdin=secret("plain", tenant_name, labels={"owner": "helm"}))
    assert labelled.returncode != 0 and DENIED in labelled.stderr, labelled.stderr

    # An ordinary Secret is admitted, and changed; made into a record by a label, it is refused.
    ordinary = as_(cp, tenant, "create", "-f", "-", stdin=secret("synced", tenant_name, labels={"app": "web"}))
    assert ordinary.returncode == 0, ordinary.stderr
    relabelled = as_(cp, tenant, "label", "secret", "synced", "-n", namespace, "tier=front")
    assert relabelled.returncode == 0, relabelled.stderr
    into_record = as_(cp, tenant, "label", "secret", "synced", "-n", namespace, "owner=helm")
    assert into_record.returncode != 0 and DENIED in into_record.stderr, into_record.stderr
    assert f"update of Secret synced in namespace {namespace}" in into_record.stderr

    # tenant-install writes a record (helm install, upgrade); the syncer may neither change it,
    # strip helm's label from it, nor delete it.
    real = f"sh.helm.release.v1.vc-{tenant_name}.v1"
    installed = as_(cp, function(INSTALL), "create", "-f", "-", stdin=record(real, tenant_name, version="1"))
    assert installed.returncode == 0, installed.stderr
    for change in (["label", "secret", real, "version=99", "--overwrite"], ["label", "secret", real, "owner-"]):
        changed = as_(cp, tenant, *change, "-n", namespace)
        assert changed.returncode != 0 and DENIED in changed.stderr, changed.stderr
    removed = as_(cp, tenant, "delete", "secret", real, "-n", namespace)
    assert removed.returncode != 0 and DENIED in removed.stderr, removed.stderr
    assert f"delete of Secret {real} in namespace {namespace}" in removed.stderr

    # Any other identity too, system:masters included.
    by_admin = kubectl(cp, "delete", "secret", real, "-n", namespace, check=False)
    assert by_admin.returncode != 0 and DENIED in by_admin.stderr, by_admin.stderr

    # tenant-cleanup removes it (helm uninstall).
    uninstalled = as_(cp, function(CLEANUP), "delete", "secret", real, "-n", namespace)
    assert uninstalled.returncode == 0, uninstalled.stderr
    left = kubectl(cp, "get", "secrets", "-n", namespace, "-l", "owner=helm", "-o", "name")
    assert left.stdout.strip() == ""


def test_deleting_the_namespace_still_removes_its_helm_records(control_plane: ControlPlane, tenant_name: str) -> None:
    """The namespace controller deletes each Secret of a deleted namespace, helm's records
    included: the policy admits a delete in a namespace that is being deleted."""
    cp, namespace = control_plane, f"vcluster-{tenant_name}"
    assert refused_once_in_force(cp, tenant_name).returncode != 0
    for version in ("1", "2"):
        name = f"sh.helm.release.v1.vc-{tenant_name}.v{version}"
        made = as_(cp, function(INSTALL), "create", "-f", "-", stdin=record(name, tenant_name, version=version))
        assert made.returncode == 0, made.stderr
    assert as_(cp, as_syncer(tenant_name), "create", "-f", "-", stdin=secret("synced", tenant_name)).returncode == 0

    kubectl(cp, "delete", "namespace", namespace, "--wait=false")
    deadline = time.monotonic() + 90
    while (found := kubectl(cp, "get", "namespace", namespace, "-o", "name", check=False)).returncode == 0:
        assert time.monotonic() < deadline, kubectl(cp, "get", "namespace", namespace, "-o", "yaml").stdout
        time.sleep(0.5)
    assert "NotFound" in found.stderr, found.stderr
