"""deploy/base/policy/tenant-deletion-protection.yaml on the test bed's real kube-apiserver (issue
28, item 3): a Tenant annotated ``kubeopera.io/deletion-protection: "true"`` is not deleted,
whoever asks (the admin here holds system:masters), and the refusal says how to lift it; once the
annotation is removed (by the very command the message gives) or set to "false", the deletion
goes through. An unprotected Tenant deletes as before. Any other value is refused when it is
written; one from before the policy is kept across other changes and still protects. A
``kubectl delete kt --all``, a DeleteCollection and a deletion of the Tenants' namespace delete
the unprotected Tenants and leave the protected one; the namespace stays Terminating until the
protection is lifted, then goes. A Tenant already being deleted cannot be protected any more, and
its finalizer can still be removed.

The policy is applied as shipped; its binding, in this test only, gets a namespaceSelector that
confines it to the namespaces the test makes (as test_helm_records_policy.py does), so a Tenant
left protected by a failed test can never hold up another test's namespace. Everything is
removed afterwards, the policy first, so no namespace is left Terminating.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from shared.model.naming import ANNOTATION_DELETION_PROTECTION as KEY
from shared.model.tenant import GROUP, PLURAL, VERSION
from testbed.controlplane import ControlPlane, create_namespace, delete_namespace, kubectl

from .tenant_objects import tenant_body

pytestmark = pytest.mark.integration

POLICY = Path(__file__).resolve().parents[2] / "deploy" / "base" / "policy" / "tenant-deletion-protection.yaml"
SCOPE_LABEL = "kubeopera.io/test-deletion-protection"
IN_FORCE_WITHIN = 30.0  # seconds: a new policy (or a namespace's new label) takes effect within a moment
NAMESPACE_GONE_WITHIN = 180.0  # the namespace controller retries a failed deletion with a backoff of up to 60 s
TENANTS = "tenants.kubeopera.io"


def protected_message(namespace: str, name: str, value: str = "true") -> str:
    return (
        f'Tenant {namespace}/{name} is protected from deletion (annotation {KEY}="{value}"); to delete it, '
        f"first lift the protection: kubectl annotate {TENANTS} {name} -n {namespace} {KEY}-"
    )


def invalid_message(namespace: str, name: str, value: str) -> str:
    return (
        f"annotation {KEY} of Tenant {namespace}/{name} must be "
        f'"true" (refuse the deletion) or "false" (allow it), not "{value}"'
    )


def tenant(name: str, namespace: str, protection: str | None = None, **meta: Any) -> str:
    body = tenant_body(name)
    body["metadata"] |= {"namespace": namespace, **meta}
    if protection is not None:
        body["metadata"]["annotations"] = {KEY: protection}
    return yaml.safe_dump(body)


def get(cp: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    found = kubectl(cp, "get", TENANTS, name, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        assert "NotFound" in found.stderr, found.stderr
        return None
    obj: dict[str, Any] = json.loads(found.stdout)
    return obj


def create(cp: ControlPlane, name: str, namespace: str, protection: str | None = None, **meta: Any) -> Any:
    return kubectl(cp, "create", "-f", "-", input=tenant(name, namespace, protection, **meta), check=False)


def in_force(cp: ControlPlane, namespace: str) -> None:
    """Wait until the policy refuses a bad value in ``namespace``: a Tenant created with one before
    that is deleted again, its value set to "false" first (the policy may be in force by then,
    and then such a value protects)."""
    deadline = time.monotonic() + IN_FORCE_WITHIN
    while (made := create(cp, "probe", namespace, "probe")).returncode == 0:
        kubectl(cp, "annotate", TENANTS, "probe", "-n", namespace, f"{KEY}=false", "--overwrite")
        kubectl(cp, "delete", TENANTS, "probe", "-n", namespace)
        assert time.monotonic() < deadline, "the deletion-protection policy did not come into force"
        time.sleep(0.5)
    assert invalid_message(namespace, "probe", "probe") in made.stderr, made.stderr


def scoped_namespace(cp: ControlPlane, token: str) -> str:
    name = f"dp-{secrets.token_hex(3)}"
    create_namespace(cp, name, {SCOPE_LABEL: token})
    return name


@pytest.fixture
def scope(control_plane: ControlPlane, tenant_crd: Path) -> Iterator[tuple[str, list[str]]]:
    """The policy in force for the namespaces labelled with a fresh token; yields the token and
    the list of namespaces the test made (the first one made here), all deleted afterwards."""
    # a letter first: hex digits alone can read as a number in YAML, and a label value is a string
    token = f"t{secrets.token_hex(3)}"
    docs = [d for d in yaml.safe_load_all(POLICY.read_text(encoding="utf-8")) if d]
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert "matchResources" not in binding["spec"], "the shipped binding applies to every namespace"
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {SCOPE_LABEL: token}}}
    namespaces = [scoped_namespace(control_plane, token)]
    try:
        kubectl(control_plane, "apply", "-f", "-", input=yaml.safe_dump_all(docs))
        in_force(control_plane, namespaces[0])
        yield token, namespaces
    finally:
        for doc in docs:
            kind = doc["kind"].lower()
            kubectl(control_plane, "delete", kind, doc["metadata"]["name"], "--ignore-not-found", check=False)
        for namespace in namespaces:
            delete_namespace(control_plane, namespace)


def test_a_protected_tenant_is_refused_until_the_annotation_is_removed(
    control_plane: ControlPlane, scope: tuple[str, list[str]]
) -> None:
    cp, namespace = control_plane, scope[1][0]
    assert create(cp, "guarded", namespace, "true").returncode == 0
    refused = kubectl(cp, "delete", TENANTS, "guarded", "-n", namespace, check=False)
    assert refused.returncode != 0, refused.stdout
    assert protected_message(namespace, "guarded") in refused.stderr, refused.stderr
    kept = get(cp, namespace, "guarded")
    assert kept is not None and "deletionTimestamp" not in kept["metadata"], kept  # not even marked
    # by the short name too, and without waiting: the same refusal
    again = kubectl(cp, "delete", "kt", "guarded", "-n", namespace, "--wait=false", check=False)
    assert protected_message(namespace, "guarded") in again.stderr, again.stderr

    # The command the message gives lifts it, as it stands ...
    command = refused.stderr.split("first lift the protection: ", 1)[1].strip().splitlines()[0]
    argv = shlex.split(command)
    assert argv[0] == "kubectl", command
    lifted = kubectl(cp, *argv[1:])
    assert lifted.returncode == 0, lifted.stderr
    lifted_tenant = get(cp, namespace, "guarded")
    assert lifted_tenant is not None and KEY not in (lifted_tenant["metadata"].get("annotations") or {})
    # ... and then the deletion goes through.
    deleted = kubectl(cp, "delete", TENANTS, "guarded", "-n", namespace, check=False)
    assert deleted.returncode == 0, deleted.stderr
    assert get(cp, namespace, "guarded") is None

    # "false" lifts it too.
    assert create(cp, "guarded-two", namespace, "true").returncode == 0
    assert kubectl(cp, "delete", TENANTS, "guarded-two", "-n", namespace, check=False).returncode != 0
    kubectl(cp, "annotate", TENANTS, "guarded-two", "-n", namespace, f"{KEY}=false", "--overwrite")
    assert kubectl(cp, "delete", TENANTS, "guarded-two", "-n", namespace, check=False).returncode == 0
    assert get(cp, namespace, "guarded-two") is None


def test_an_unprotected_tenant_deletes_as_before(control_plane: ControlPlane, scope: tuple[str, list[str]]) -> None:
    cp, namespace = control_plane, scope[1][0]
    for name, protection in (("plain", None), ("allowed", "false")):
        assert create(cp, name, namespace, protection).returncode == 0
        deleted = kubectl(cp, "delete", TENANTS, name, "-n", namespace, check=False)
        assert deleted.returncode == 0, deleted.stderr
        assert get(cp, namespace, name) is None
    # Protecting one later (an update) works as protecting it at creation.
    assert create(cp, "later", namespace).returncode == 0
    kubectl(cp, "annotate", TENANTS, "later", "-n", namespace, f"{KEY}=true")
    refused = kubectl(cp, "delete", TENANTS, "later", "-n", namespace, check=False)
    assert protected_message(namespace, "later") in refused.stderr, refused.stderr
    kubectl(cp, "annotate", TENANTS, "later", "-n", namespace, f"{KEY}-")


def test_any_other_value_is_refused_when_written(control_plane: ControlPlane, scope: tuple[str, list[str]]) -> None:
    cp, namespace = control_plane, scope[1][0]
    for value in ("yes", "True", "ture", "1", ""):
        made = create(cp, "typo", namespace, value)
        assert made.returncode != 0, f"{value!r} admitted"
        assert invalid_message(namespace, "typo", value) in made.stderr, made.stderr
    assert create(cp, "typo", namespace).returncode == 0
    changed = kubectl(cp, "annotate", TENANTS, "typo", "-n", namespace, f"{KEY}=yes", check=False)
    assert changed.returncode != 0 and invalid_message(namespace, "typo", "yes") in changed.stderr, changed.stderr
    assert create(cp, "typo-two", namespace, "true").returncode == 0
    overwritten = kubectl(cp, "annotate", TENANTS, "typo-two", "-n", namespace, f"{KEY}=on", "--overwrite", check=False)
    assert overwritten.returncode != 0 and invalid_message(namespace, "typo-two", "on") in overwritten.stderr
    kubectl(cp, "annotate", TENANTS, "typo-two", "-n", namespace, f"{KEY}-")


def test_a_value_from_before_the_policy_is_kept_and_protects(
    control_plane: ControlPlane, scope: tuple[str, list[str]]
) -> None:
    """A Tenant annotated "yes" where the policy did not apply (a namespace outside the binding's
    selector, as a cluster before the policy was installed) and then brought under it."""
    cp, token = control_plane, scope[0]
    namespace = f"dp-{secrets.token_hex(3)}"
    create_namespace(cp, namespace)
    scope[1].append(namespace)
    assert create(cp, "older", namespace, "yes").returncode == 0
    kubectl(cp, "label", "namespace", namespace, f"{SCOPE_LABEL}={token}")
    in_force(cp, namespace)
    # Updates that leave the value alone are admitted (a finalizer's removal among them) ...
    assert kubectl(cp, "label", TENANTS, "older", "-n", namespace, "team=blue").returncode == 0
    # ... it may not become another wrong value, and it protects (fail safe) until set right.
    wrong = kubectl(cp, "annotate", TENANTS, "older", "-n", namespace, f"{KEY}=no", "--overwrite", check=False)
    assert invalid_message(namespace, "older", "no") in wrong.stderr, wrong.stderr
    refused = kubectl(cp, "delete", TENANTS, "older", "-n", namespace, check=False)
    assert protected_message(namespace, "older", "yes") in refused.stderr, refused.stderr
    kubectl(cp, "annotate", TENANTS, "older", "-n", namespace, f"{KEY}=false", "--overwrite")
    assert kubectl(cp, "delete", TENANTS, "older", "-n", namespace, check=False).returncode == 0


def test_delete_all_and_delete_collection_leave_the_protected_tenant(
    control_plane: ControlPlane, scope: tuple[str, list[str]], custom_objects: k8s.CustomObjectsApi
) -> None:
    cp, namespace = control_plane, scope[1][0]
    for name, protection in (("keep", "true"), ("drop-one", None), ("drop-two", "false")):
        assert create(cp, name, namespace, protection).returncode == 0
    everything = kubectl(cp, "delete", TENANTS, "--all", "-n", namespace, check=False)
    assert everything.returncode != 0, everything.stdout  # kubectl says it could not delete them all
    assert protected_message(namespace, "keep") in everything.stderr, everything.stderr
    left = kubectl(cp, "get", TENANTS, "-n", namespace, "-o", "name").stdout.split()
    assert left == ["tenant.kubeopera.io/keep"], left

    # One DeleteCollection request (what the namespace controller sends): each Tenant is a DELETE
    # of its own to admission, the unprotected ones go, the request fails with the refusal.
    assert create(cp, "drop-three", namespace).returncode == 0
    with pytest.raises(ApiException) as collection:
        custom_objects.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    assert collection.value.status == 403, collection.value.body
    assert protected_message(namespace, "keep") in json.loads(collection.value.body)["message"]
    left = kubectl(cp, "get", TENANTS, "-n", namespace, "-o", "name").stdout.split()
    assert left == ["tenant.kubeopera.io/keep"], left
    kubectl(cp, "annotate", TENANTS, "keep", "-n", namespace, f"{KEY}-")


def test_a_namespace_deletion_waits_for_the_protection_to_be_lifted(
    control_plane: ControlPlane, scope: tuple[str, list[str]]
) -> None:
    cp, namespace = control_plane, scope[1][0]
    assert create(cp, "keep", namespace, "true").returncode == 0
    assert create(cp, "drop", namespace).returncode == 0
    kubectl(cp, "delete", "namespace", namespace, "--wait=false")
    # The namespace controller's deletion of the Tenants fails on the protected one; it says so in
    # the namespace's conditions and leaves it, not even marked for deletion.
    deadline = time.monotonic() + IN_FORCE_WITHIN
    while True:
        ns = json.loads(kubectl(cp, "get", "namespace", namespace, "-o", "json").stdout)
        failures = [c for c in ns["status"].get("conditions", []) if c["type"] == "NamespaceDeletionContentFailure"]
        if failures and failures[0]["status"] == "True" and "protected from deletion" in failures[0]["message"]:
            break
        assert time.monotonic() < deadline, ns["status"]
        time.sleep(0.5)
    assert protected_message(namespace, "keep") in failures[0]["message"], failures[0]
    assert ns["status"]["phase"] == "Terminating"
    assert get(cp, namespace, "drop") is None
    kept = get(cp, namespace, "keep")
    assert kept is not None and "deletionTimestamp" not in kept["metadata"], kept
    # A Terminating namespace admits updates: lifting the protection lets the namespace go.
    kubectl(cp, "annotate", TENANTS, "keep", "-n", namespace, f"{KEY}-")
    deadline = time.monotonic() + NAMESPACE_GONE_WITHIN
    while (found := kubectl(cp, "get", "namespace", namespace, "-o", "name", check=False)).returncode == 0:
        assert time.monotonic() < deadline, kubectl(cp, "get", "namespace", namespace, "-o", "yaml").stdout
        time.sleep(1)
    assert "NotFound" in found.stderr, found.stderr


def test_a_tenant_being_deleted_cannot_be_protected(control_plane: ControlPlane, scope: tuple[str, list[str]]) -> None:
    """The deletion was admitted: cleanup is at work and must be able to remove its finalizer."""
    cp, namespace = control_plane, scope[1][0]
    assert create(cp, "going", namespace, finalizers=["kubeopera.io/cleanup"]).returncode == 0
    assert kubectl(cp, "delete", TENANTS, "going", "-n", namespace, "--wait=false").returncode == 0
    going = get(cp, namespace, "going")
    assert going is not None and "deletionTimestamp" in going["metadata"], going
    late = kubectl(cp, "annotate", TENANTS, "going", "-n", namespace, f"{KEY}=true", check=False)
    assert late.returncode != 0, late.stdout
    assert (
        f"Tenant {namespace}/going is already being deleted (since {going['metadata']['deletionTimestamp']}); "
        f"{KEY}=true can no longer stop it"
    ) in late.stderr, late.stderr
    # What cleanup does at the end: the finalizer goes, and so does the Tenant.
    patch = json.dumps([{"op": "remove", "path": "/metadata/finalizers"}])
    kubectl(cp, "patch", TENANTS, "going", "-n", namespace, "--type=json", "-p", patch)
    assert get(cp, namespace, "going") is None
