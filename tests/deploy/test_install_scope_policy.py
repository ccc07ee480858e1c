"""deploy/base/policy/tenant-write-scope.yaml really narrows what tenant-install may write, on
the test bed's real kube-apiserver: RBAC alone would let it make RoleBindings anywhere, binding
its own per-namespace ClusterRole (helm's and the chart's rules, Secrets included) with `bind`;
the admission policy keeps it to vcluster-* namespaces and to Tenants and Events in
kubeopera-system. Its helm rules are not cluster-wide: outside a namespace where it bound them it
cannot even write a ConfigMap.

Requests are made as the ServiceAccount by impersonation. Everything this test creates that
did not exist before is deleted afterwards, so the rest of the session (the end-to-end tests
create these RBAC objects themselves) sees the API server as it was.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from shared.model.naming import DEFAULT_TENANT_NAMESPACE

from .manifests import DEPLOY, RBAC, documents, impersonating, kubectl_run

pytestmark = pytest.mark.integration

POLICY = DEPLOY / "base" / "policy" / "tenant-write-scope.yaml"
NAMESPACE = DEFAULT_TENANT_NAMESPACE
IMPERSONATE = impersonating("tenant-install")
DENIED = "tenant-install may only change vcluster-* namespaces"
OWN_CLUSTER_ROLE = "kubeopera-tenants:tenant-install:vcluster-namespace"


run = kubectl_run


def configmap(name: str, namespace: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}})


def lease(name: str, namespace: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"holderIdentity": "policy-test", "leaseDurationSeconds": 30},
        }
    )


def own_binding(name: str, namespace: str) -> str:
    """A RoleBinding of install's per-namespace ClusterRole to install, as shared/steps/access.py makes it."""
    return yaml.safe_dump(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": OWN_CLUSTER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant-install", "namespace": NAMESPACE}],
        }
    )


@pytest.fixture
def policy_in_force(kubectl: Path, kube_admin_kubeconfig: Path) -> Iterator[str]:
    """tenant-install's RBAC and the policy applied; yields a fresh vcluster-* namespace."""
    text = "\n---\n".join(
        [
            f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n",
            (RBAC / "tenant-install.yaml").read_text(encoding="utf-8"),
            POLICY.read_text(encoding="utf-8"),
        ]
    )
    created = []
    for doc in documents(text):
        ref = f"{doc['kind'].lower()}/{doc['metadata']['name']}"
        namespace = doc["metadata"].get("namespace")
        args = ["get", ref, *(["-n", namespace] if namespace else [])]
        if run(kubectl, kube_admin_kubeconfig, *args).returncode != 0:
            created.append((ref, namespace))
    applied = run(
        kubectl,
        kube_admin_kubeconfig,
        "apply",
        "--server-side",
        "--field-manager=kubeopera-policy-test",
        "-f",
        "-",
        stdin=text,
    )
    assert applied.returncode == 0, applied.stderr
    vcluster_ns = f"vcluster-scope-{secrets.token_hex(3)}"
    try:
        yield vcluster_ns
    finally:
        for ref, namespace in reversed(created):
            if ref.startswith("namespace/"):
                continue  # kubeopera-system is shared with the other tests of the session
            run(kubectl, kube_admin_kubeconfig, "delete", ref, *(["-n", namespace] if namespace else []))


def as_install(
    kubectl: Path, kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run(kubectl, kubeconfig, *IMPERSONATE, *args, stdin=stdin)


def test_policy_keeps_install_inside_its_namespaces(
    kubectl: Path, kube_admin_kubeconfig: Path, policy_in_force: str
) -> None:
    other = f"scope-{secrets.token_hex(3)}"
    # Its helm rules are per namespace: RBAC itself refuses a ConfigMap (or a Secret read) elsewhere ...
    for namespace in ("default", NAMESPACE):
        for verb, resource in (("create", "configmaps"), ("get", "secrets")):
            can = as_install(kubectl, kube_admin_kubeconfig, "auth", "can-i", verb, resource, "-n", namespace)
            assert can.stdout.strip() == "no", f"{verb} {resource} in {namespace}: {can.stdout}{can.stderr}"
    # ... but RBAC alone lets tenant-install make RoleBindings anywhere, kubeopera-system included,
    # and with `bind` one of its per-namespace ClusterRole, which would give it those rules there ...
    for namespace in ("default", NAMESPACE):
        can = as_install(kubectl, kube_admin_kubeconfig, "auth", "can-i", "create", "rolebindings", "-n", namespace)
        assert can.stdout.strip() == "yes", can.stdout + can.stderr
    # ... the policy says no. It takes effect within a moment of being created.
    deadline = time.monotonic() + 30
    while True:
        denied = as_install(
            kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=own_binding(f"probe-{other}", "default")
        )
        if denied.returncode != 0 or time.monotonic() > deadline:
            break
        run(kubectl, kube_admin_kubeconfig, "delete", "rolebinding", f"probe-{other}", "-n", "default")
        time.sleep(0.5)
    assert denied.returncode != 0 and DENIED in denied.stderr, denied.stdout + denied.stderr
    in_system = as_install(
        kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=own_binding(f"probe-{other}", NAMESPACE)
    )
    assert in_system.returncode != 0 and DENIED in in_system.stderr, in_system.stderr
    outside = as_install(kubectl, kube_admin_kubeconfig, "create", "namespace", other)
    assert outside.returncode != 0 and DENIED in outside.stderr, outside.stderr

    # What install does is allowed: its namespace, its own binding there, then the chart's objects
    # in it (once that binding is in force), Events at home.
    ns = as_install(kubectl, kube_admin_kubeconfig, "create", "namespace", policy_in_force)
    assert ns.returncode == 0, ns.stderr
    label = as_install(
        kubectl, kube_admin_kubeconfig, "label", "namespace", policy_in_force, "kubeopera.io/managed-by=test"
    )
    assert label.returncode == 0, label.stderr
    own = own_binding("kubeopera-tenants:tenant-install", policy_in_force)
    bound = as_install(kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=own)
    assert bound.returncode == 0, bound.stderr
    deadline = time.monotonic() + 30
    while True:
        inside = as_install(
            kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=configmap("chart-object", policy_in_force)
        )
        if inside.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # a RoleBinding counts once the API server's RBAC cache has it
    assert inside.returncode == 0, inside.stderr
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"probe-{other}", "namespace": NAMESPACE},
        "involvedObject": {"kind": "Tenant", "namespace": NAMESPACE, "name": "probe"},
        "reason": "Probe",
        "message": "policy test",
        "type": "Normal",
    }
    recorded = as_install(kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=yaml.safe_dump(event))
    assert recorded.returncode == 0, recorded.stderr
    run(kubectl, kube_admin_kubeconfig, "delete", "event", f"probe-{other}", "-n", NAMESPACE)
    # At home it holds the work lock of a Tenant's namespace (shared/steps/locks.py) and the fleet
    # upgrade's rollout slots and halt record (shared/steps/rollout.py), and only those kinds of
    # Lease besides the claims of cloudSpaceIDs.
    for lock in (f"lock-vcluster-{other}", "rollout-slot-0", "rollout-halted"):
        taken = as_install(kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=lease(lock, NAMESPACE))
        assert taken.returncode == 0, taken.stderr
        given_up = as_install(kubectl, kube_admin_kubeconfig, "delete", "lease", lock, "-n", NAMESPACE)
        assert given_up.returncode == 0, given_up.stderr
    foreign = as_install(kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=lease(f"probe-{other}", NAMESPACE))
    assert foreign.returncode != 0 and DENIED in foreign.stderr, foreign.stdout + foreign.stderr
    run(kubectl, kube_admin_kubeconfig, "delete", "namespace", policy_in_force, "--wait=false")
