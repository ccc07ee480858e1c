"""deploy/base/policy/tenant-write-scope.yaml really narrows what
tenant-store-kubeconfig may write, on the test bed's real kube-apiserver: RBAC alone lets it
create any Secret in kubeopera-system (``create`` cannot be narrowed by name), the admission
policy keeps it to stored kubeconfigs (``tenant-<cloudSpaceID>-kubeconfig``), Tenants' status
and Events there.

Requests are made as the ServiceAccount by impersonation. Everything this test creates that did
not exist before is deleted afterwards (as in test_install_scope_policy.py).
"""

from __future__ import annotations

import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from shared.model.naming import DEFAULT_TENANT_NAMESPACE

from .manifests import DEPLOY, RBAC, documents, impersonating, kubectl_run

pytestmark = pytest.mark.integration

POLICY = DEPLOY / "base" / "policy" / "tenant-write-scope.yaml"
NAMESPACE = DEFAULT_TENANT_NAMESPACE
IMPERSONATE = impersonating("tenant-store-kubeconfig")
DENIED = "tenant-store-kubeconfig may only write Secrets named tenant-<cloudSpaceID>-kubeconfig"


run = kubectl_run


def secret(name: str, namespace: str = NAMESPACE) -> str:
    return yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "data": {}}
    )


@pytest.fixture
def policy_in_force(kubectl: Path, kube_admin_kubeconfig: Path) -> Iterator[None]:
    """tenant-store-kubeconfig's RBAC and the policy applied."""
    text = "\n---\n".join(
        [
            f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n",
            (RBAC / "tenant-store-kubeconfig.yaml").read_text(encoding="utf-8"),
            POLICY.read_text(encoding="utf-8"),
        ]
    )
    created = []
    for doc in documents(text):
        ref = f"{doc['kind'].lower()}/{doc['metadata']['name']}"
        namespace = doc["metadata"].get("namespace")
        if run(kubectl, kube_admin_kubeconfig, "get", ref, *(["-n", namespace] if namespace else [])).returncode:
            created.append((ref, namespace))
    applied = run(
        kubectl, kube_admin_kubeconfig, "apply", "--server-side", "--field-manager=kubeopera-policy-test", "-f", "-",
        stdin=text,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    try:
        yield
    finally:
        for ref, namespace in reversed(created):
            if not ref.startswith("namespace/"):  # kubeopera-system is shared with the session
                run(kubectl, kube_admin_kubeconfig, "delete", ref, *(["-n", namespace] if namespace else []))


def as_store(kubectl: Path, kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run(kubectl, kubeconfig, *IMPERSONATE, *args, stdin=stdin)


def test_policy_keeps_store_kubeconfig_to_stored_kubeconfigs(
    kubectl: Path, kube_admin_kubeconfig: Path, policy_in_force: None
) -> None:
    probe = f"not-a-kubeconfig-{secrets.token_hex(3)}"
    # RBAC alone lets it create any Secret in kubeopera-system ...
    can = as_store(kubectl, kube_admin_kubeconfig, "auth", "can-i", "create", "secrets", "-n", NAMESPACE)
    assert can.stdout.strip() == "yes", can.stdout + can.stderr
    # ... the policy says no. It takes effect within a moment of being created.
    deadline = time.monotonic() + 30
    while True:
        denied = as_store(kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=secret(probe))
        if denied.returncode != 0 or time.monotonic() > deadline:
            break
        run(kubectl, kube_admin_kubeconfig, "delete", "secret", probe, "-n", NAMESPACE)
        time.sleep(0.5)
    assert denied.returncode != 0 and DENIED in denied.stderr, denied.stdout + denied.stderr
    assert f"not secrets {probe} in namespace {NAMESPACE}" in denied.stderr

    # The internal token, and names that only look like a stored kubeconfig (no UUID; one without
    # its dashes; another suffix).
    for name in (
        "kubeopera-internal-token",
        "tenant-x-kubeconfig",
        f"tenant-{uuid.uuid4().hex}-kubeconfig",
        f"tenant-{uuid.uuid4()}-kubeconfig-copy",
    ):
        looks_like = as_store(kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=secret(name))
        assert looks_like.returncode != 0 and DENIED in looks_like.stderr, looks_like.stderr

    # A stored kubeconfig is admitted: created, then updated (as store-kubeconfig replaces it).
    stored = f"tenant-{uuid.uuid4()}-kubeconfig"
    made = as_store(kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=secret(stored))
    assert made.returncode == 0, made.stderr
    try:
        current = yaml.safe_load(run(kubectl, kube_admin_kubeconfig, "get", "secret", stored, "-n", NAMESPACE,
                                     "-o", "yaml").stdout)  # fmt: skip
        current["data"] = {"kubeconfig": "e30="}
        replaced = as_store(kubectl, kube_admin_kubeconfig, "replace", "-f", "-", stdin=yaml.safe_dump(current))
        assert replaced.returncode == 0, replaced.stderr
    finally:
        run(kubectl, kube_admin_kubeconfig, "delete", "secret", stored, "-n", NAMESPACE)

    # Events on a Tenant, as every function records them.
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"probe-{probe}", "namespace": NAMESPACE},
        "involvedObject": {"kind": "Tenant", "namespace": NAMESPACE, "name": "probe"},
        "reason": "Probe",
        "message": "policy test",
        "type": "Normal",
    }
    recorded = as_store(kubectl, kube_admin_kubeconfig, "create", "-f", "-", stdin=yaml.safe_dump(event))
    assert recorded.returncode == 0, recorded.stderr
    run(kubectl, kube_admin_kubeconfig, "delete", "event", f"probe-{probe}", "-n", NAMESPACE)
