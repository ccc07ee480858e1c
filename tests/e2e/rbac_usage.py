"""Is every RBAC rule of ``deploy/base/rbac`` used? Read from the API server's audit log.

The test bed's audit policy records everything the product's ServiceAccounts do
(``testbed/controlplane/startup.py``). ``unused_rules`` compares that with the rules each
function's Role and ClusterRole grant. A few rules cannot show up in a run, each listed in
``NOT_EXERCISED_HERE`` with its reason. Events' get and patch fold a repeated Event into a count:
every function records Events through the same code (``Kube.record_event``), so the fold has to
have run for some function of the run, not for each.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import yaml

from testbed.local.stack import TENANT_NAMESPACE

REPO = Path(__file__).resolve().parents[2]
FOLD = {("", "events", "get"), ("", "events", "patch")}

CHART_ROLE_KINDS = {"configmaps", "secrets", "services", "serviceaccounts", "pods", "pods/attach", "pods/portforward"}
NOT_EXERCISED_HERE: dict[str, list[tuple[str, set[str], set[str], str]]] = {
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
    ],
    "tenant-cleanup": [
        ("coordination.k8s.io", {"leases"}, {"get", "update"}, "another holder's Lease: tests/e2e/test_faults.py"),
    ],
}


def exempt(service: str, group: str, resource: str, verb: str) -> bool:
    return any(
        group == g and resource in resources and verb in verbs
        for g, resources, verbs, _ in NOT_EXERCISED_HERE.get(service, [])
    )


def granted(service: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every rule of the function's Role and ClusterRole."""
    path = REPO / "deploy" / "base" / "rbac" / f"{service}.yaml"
    out = set()
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc["kind"] in ("Role", "ClusterRole"):
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            out.add((group, resource, verb))
    return out


def used(audit_log: Path, service: str) -> set[tuple[str, str, str]]:
    user = f"system:serviceaccount:{TENANT_NAMESPACE}:{service}"
    out = set()
    for line in audit_log.read_text().splitlines():
        entry = json.loads(line)
        ref = entry.get("objectRef")
        if entry["user"]["username"] != user or not ref or entry.get("stage") != "ResponseComplete":
            continue
        if entry.get("responseStatus", {}).get("code") in (401, 403):
            continue  # refused: not a use of any rule
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.add((ref.get("apiGroup", ""), resource, entry["verb"]))
    return out


def unused_rules(
    audit_log: Path, services: Iterable[str], fold_required: bool = True
) -> dict[str, list[tuple[str, str, str]]]:
    """(apiGroup, resource, verb) granted to each service and never used in the audit log."""
    uses = {service: used(audit_log, service) for service in services}
    if fold_required:
        assert set().union(*uses.values()) >= FOLD, "no repeated Event was folded into a count in this run"
    unused = {}
    for service, seen in uses.items():
        left = {(g, r, v) for g, r, v in granted(service) - seen - FOLD if not exempt(service, g, r, v)}
        if left:
            unused[service] = sorted(left)
    return unused
