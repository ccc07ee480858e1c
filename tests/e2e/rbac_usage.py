"""Is every RBAC rule of ``deploy/base/rbac`` and of the ApiServerSource
(``eventing/apiserversource-rbac.yaml``) used, where it applies? Read from the API server's
audit log.

The test bed's audit policy records everything the product's ServiceAccounts do
(``testbed/controlplane/startup.py``). ``unused_rules`` compares that with the rules each
function's Role and ClusterRole grant, and with the Roles install makes in each Tenant's
namespace (``shared.steps.access``), each in its scope: a Role's rule counts only for uses in its
namespace, a ClusterRole that install binds per Tenant namespace (install's own included) only
for uses in vcluster-* namespaces, any other ClusterRole for uses anywhere. A few rules cannot
show up in a run, each listed in ``NOT_EXERCISED_HERE`` with its reason; install's ``bind`` is
one: it is checked when install creates a RoleBinding to one of those ClusterRoles, as part of
that request, and never is a request of its own. Events' get and patch fold a repeated Event into a count:
every function records Events through the same code (``Kube.record_event``), so the fold has to
have run for some function of the run, not for each.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import yaml

from shared.model.tenant import Tenant
from shared.steps import access
from testbed.local.stack import TENANT_NAMESPACE

REPO = Path(__file__).resolve().parents[2]
FOLD = {("", "events", "get"), ("", "events", "patch")}

CHART_ROLE_KINDS = {"configmaps", "secrets", "services", "serviceaccounts", "pods", "pods/attach", "pods/portforward"}
SOURCES_RBAC = REPO / "eventing" / "apiserversource-rbac.yaml"
SOURCES = ("tenant-source",)  # the ApiServerSource's ServiceAccount
NOT_EXERCISED_HERE: dict[str, list[tuple[str, set[str], set[str], str]]] = {
    **{
        source: [
            (
                group,
                {resource},
                {"get"},
                "Knative's controller checks it with a SubjectAccessReview before it starts the adapter, "
                "which only lists and watches",
            )
        ]
        for source, group, resource in (("tenant-source", "kubeopera.io", "tenants"),)
    },
    "tenant-install": [
        (
            "",
            {*CHART_ROLE_KINDS, "pods/exec", "persistentvolumeclaims", "endpoints", "events", "pods/log"},
            {"get", "list", "watch", "create", "update", "patch", "delete"},
            "escalation: the vcluster chart's Role grants these, so creating it requires holding them",
        ),
        ("", {"pods/status", "pods/ephemeralcontainers"}, {"patch", "update"}, "escalation (the real chart's Role)"),
        ("apps", {"replicasets", "deployments"}, {"get", "list", "watch"}, "escalation"),
        ("apps", {"statefulsets"}, {"list", "watch"}, "escalation"),
        (
            "networking.k8s.io",
            {"ingresses"},
            {"get", "list", "watch", "create", "update", "patch", "delete"},
            "escalation",
        ),
        ("apps", {"statefulsets"}, {"delete"}, "uninstall of a stuck pending-install: tests/e2e/test_faults.py"),
        (
            "rbac.authorization.k8s.io",
            {"roles", "rolebindings"},
            {"patch", "delete"},
            "an upgrade that changes or drops them",
        ),
        ("coordination.k8s.io", {"leases"}, {"get", "update"}, "another holder's Lease: tests/e2e/test_faults.py"),
        (
            "rbac.authorization.k8s.io",
            {"clusterroles"},
            {"bind"},
            "authorizes the roleRef of install's RoleBindings to the per-namespace ClusterRoles "
            "(shared/steps/access.py), "
            "within their create: no request of its own in the audit log; without it the create is refused "
            "(tests/integration/test_namespace_access.py, tests/deploy/test_install_scope_policy.py)",
        ),
        (
            "",
            {"resourcequotas", "limitranges"},
            {"patch", "delete"},
            "an upgrade that changes them (a quota change, a TENANT_* setting); uninstall of a stuck "
            "pending-install: tests/e2e/test_faults.py",
        ),
        (
            "networking.k8s.io",
            {"networkpolicies"},
            {"patch", "delete"},
            "an upgrade that changes them (TENANT_EGRESS_*); uninstall of a stuck pending-install",
        ),
    ],
    "tenant-notify-api": [
        (
            "kubeopera.io",
            {"tenants"},
            {"list"},
            "the Tenants waiting for a fleet upgrade's slot, once one is Ready: tests/e2e/test_rollout.py",
        ),
    ],
    "tenant-resync": [
        (
            "coordination.k8s.io",
            {"leases"},
            {"create"},
            "the halt record of a fleet upgrade, when a Tenant fails its upgrade: tests/e2e/test_rollout.py",
        ),
    ],
    "tenant-cleanup": [
        ("coordination.k8s.io", {"leases"}, {"get", "update"}, "another holder's Lease: tests/e2e/test_faults.py"),
        (
            "",
            {"persistentvolumes"},
            {"delete"},
            "only with DELETE_RETAINED_VOLUMES=true: tests/unit/test_lifecycle_decisions.py",
        ),
    ],
}


def exempt(service: str, group: str, resource: str, verb: str) -> bool:
    return any(
        group == g and resource in resources and verb in verbs
        for g, resources, verbs, _ in NOT_EXERCISED_HERE.get(service, [])
    )


# Where a rule applies: this namespace, every vcluster-* namespace, or anywhere.
TENANT_NAMESPACES = "vcluster-*"
ANYWHERE = "*"
# Any Tenant: what install grants in a Tenant's namespace has the same rules for every Tenant
# but the name of vcluster's Secret, and resourceNames do not count here.
SAMPLE = Tenant.from_object(
    {
        "metadata": {"name": "sample", "namespace": TENANT_NAMESPACE, "uid": "u", "generation": 1},
        "spec": {
            "userID": "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
            "tenantName": "sample",
            "cloudSpaceID": "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b",
            "quota": {"cpu": "1", "memory": "1Gi"},
        },
    }
)


def _expanded(scope: str, rule: dict[str, list[str]]) -> set[tuple[str, str, str, str]]:
    return {
        (scope, group, resource, verb)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def granted(service: str) -> set[tuple[str, str, str, str]]:
    """(scope, apiGroup, resource, verb) of every rule of the function's Role and ClusterRoles,
    and of the Roles install makes for it in each Tenant's namespace."""
    path = SOURCES_RBAC if service in SOURCES else REPO / "deploy" / "base" / "rbac" / f"{service}.yaml"
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    bound = {
        doc["roleRef"]["name"]
        for doc in docs
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding") and any(s["name"] == service for s in doc["subjects"])
    }
    out = set()
    for doc in docs:
        if service in SOURCES and doc["metadata"]["name"] not in bound:
            continue  # the other source's
        if doc["kind"] == "Role":
            scope = doc["metadata"]["namespace"]
        elif doc["kind"] == "ClusterRole":
            per_tenant = doc["metadata"]["name"] == access.cluster_role(service)
            scope = TENANT_NAMESPACES if per_tenant else ANYWHERE
        else:
            continue
        for rule in doc["rules"]:
            out |= _expanded(scope, rule)
    grants = access.namespace_grants(SAMPLE, TENANT_NAMESPACE)
    roles = {role.name: role for role in grants.roles}
    for binding in grants.bindings:
        if binding.role_ref.kind == "Role" and any(s.name == service for s in binding.subjects):
            for made in roles[binding.role_ref.name].rules:
                out |= _expanded(TENANT_NAMESPACES, made.manifest())
    return out


def applies(scope: str, namespace: str) -> bool:
    if scope == ANYWHERE:
        return True
    if scope == TENANT_NAMESPACES:
        return namespace.startswith("vcluster-")
    return namespace == scope


def used(audit_log: Path, service: str) -> set[tuple[str, str, str, str]]:
    """(namespace, apiGroup, resource, verb) of every request the service made that was not
    refused ("" for a cluster-scoped object)."""
    user = f"system:serviceaccount:{TENANT_NAMESPACE}:{service}"
    out = set()
    for line in audit_log.read_text().splitlines():
        entry = json.loads(line)
        ref = entry.get("objectRef")
        # A request counts once answered; a watch is answered when it starts streaming, and may
        # not end (ResponseComplete) within the run.
        stage = "ResponseStarted" if entry.get("verb") == "watch" else "ResponseComplete"
        if entry["user"]["username"] != user or not ref or entry.get("stage") != stage:
            continue
        if entry.get("responseStatus", {}).get("code") in (401, 403):
            continue  # refused: not a use of any rule
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.add((ref.get("namespace", ""), ref.get("apiGroup", ""), resource, entry["verb"]))
    return out


def unused_rules(
    audit_log: Path, services: Iterable[str], fold_required: bool = True
) -> dict[str, list[tuple[str, str, str, str]]]:
    """(scope, apiGroup, resource, verb) granted to each service and never used in that scope."""
    uses = {service: used(audit_log, service) for service in services}
    if fold_required:
        folded = {(g, r, v) for seen in uses.values() for _, g, r, v in seen}
        assert folded >= FOLD, "no repeated Event was folded into a count in this run"
    unused = {}
    for service, seen in uses.items():
        left = {
            (scope, g, r, v)
            for scope, g, r, v in granted(service)
            if (g, r, v) not in FOLD
            and not exempt(service, g, r, v)
            and not any((g, r, v) == (ug, ur, uv) and applies(scope, ns) for ns, ug, ur, uv in seen)
        }
        if left:
            unused[service] = sorted(left)
    return unused
