"""No function but install reads Secrets cluster-wide: the manifests hold what ``shared.access``
binds in each Tenant's namespace, bind it nowhere themselves, and give install every rule it
grants there (Kubernetes' escalation check), as read from the files of ``deploy/base/rbac``."""

from __future__ import annotations

from typing import Any

import pytest

from shared import access
from shared.naming import DEFAULT_TENANT_NAMESPACE
from shared.rbac import Rule
from shared.tenant import Tenant

from .manifests import RBAC, documents

NAMESPACE_SERVICES = ("tenant-check-ready", "tenant-store-kubeconfig", "tenant-cleanup")
TENANT = Tenant.from_object(
    {
        "apiVersion": "kubeopera.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": "bob-dev", "namespace": DEFAULT_TENANT_NAMESPACE, "uid": "uid-bob", "generation": 1},
        "spec": {
            "userID": "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
            "tenantName": "bob-dev",
            "cloudSpaceID": "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b",
            "quota": {"cpu": "2", "memory": "4Gi"},
        },
    }
)


def rbac_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(RBAC.glob("*.yaml")) for doc in documents(path.read_text(encoding="utf-8"))]


def cluster_roles() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in rbac_documents() if doc["kind"] == "ClusterRole"}


def rules_of(doc: dict[str, Any]) -> tuple[Rule, ...]:
    return tuple(Rule.of(rule) for rule in doc["rules"])


def covers(held: tuple[Rule, ...], wanted: Rule) -> bool:
    """Does ``held`` (rules without resourceNames, cluster-wide) grant every verb of ``wanted``?"""
    return all(
        any(
            not rule.resource_names and group in rule.api_groups and resource in rule.resources and verb in rule.verbs
            for rule in held
        )
        for group in wanted.api_groups
        for resource in wanted.resources
        for verb in wanted.verbs
    )


@pytest.mark.parametrize("service", sorted(access.NAMESPACE_RULES))
def test_the_namespace_cluster_role_holds_exactly_what_install_binds(service: str) -> None:
    name = access.cluster_role(service)
    path = RBAC / f"{service}.yaml"
    in_file = {doc["metadata"]["name"]: doc for doc in documents(path.read_text(encoding="utf-8"))}
    assert name in in_file, f"{path.name} has no ClusterRole {name}"
    assert rules_of(in_file[name]) == access.NAMESPACE_RULES[service]


def test_no_manifest_binds_the_namespace_cluster_roles() -> None:
    """Only install binds them, one Tenant namespace at a time."""
    runtime_only = {access.cluster_role(service) for service in access.NAMESPACE_RULES}
    bindings = [doc for doc in rbac_documents() if doc["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert [b["metadata"]["name"] for b in bindings if b["roleRef"]["name"] in runtime_only] == []


@pytest.mark.parametrize("service", NAMESPACE_SERVICES)
def test_no_secret_rule_is_cluster_wide_for_the_functions_that_read_in_tenant_namespaces(service: str) -> None:
    roles = cluster_roles()
    for binding in (doc for doc in rbac_documents() if doc["kind"] == "ClusterRoleBinding"):
        accounts = {(s["namespace"], s["name"]) for s in binding["subjects"] if s["kind"] == "ServiceAccount"}
        if (DEFAULT_TENANT_NAMESPACE, service) not in accounts:
            continue
        granted = roles[binding["roleRef"]["name"]]
        secret_rules = [rule for rule in granted["rules"] if "secrets" in rule["resources"]]
        assert secret_rules == [], f"{binding['metadata']['name']} grants {service} Secrets cluster-wide"


def test_install_holds_every_rule_it_grants_so_it_needs_no_bind() -> None:
    install = rules_of(cluster_roles()["kubeopera-tenants:tenant-install"])
    granted = [*access.store_kubeconfig_rules(TENANT)]
    granted += [rule for rules in access.NAMESPACE_RULES.values() for rule in rules]
    assert [rule for rule in granted if not covers(install, rule)] == []
    # and it may make, check, put back and remake the Roles and RoleBindings themselves
    assert covers(
        install, Rule(("rbac.authorization.k8s.io",), ("roles", "rolebindings"), ("get", "create", "patch", "delete"))
    )
    assert not any({"bind", "escalate"} & set(rule.verbs) for rule in install)


def test_what_install_makes_in_a_namespace_binds_these_service_accounts_there_only() -> None:
    grants = access.namespace_grants(TENANT, DEFAULT_TENANT_NAMESPACE)
    subjects = {(s.kind, s.namespace, s.name) for b in grants.bindings for s in b.subjects}
    assert subjects == {("ServiceAccount", DEFAULT_TENANT_NAMESPACE, service) for service in NAMESPACE_SERVICES}
    for service in NAMESPACE_SERVICES:  # each is the ServiceAccount of its own file
        (account,) = [d for d in documents((RBAC / f"{service}.yaml").read_text()) if d["kind"] == "ServiceAccount"]
        assert (account["metadata"]["namespace"], account["metadata"]["name"]) == (DEFAULT_TENANT_NAMESPACE, service)
    assert {b.namespace for b in grants.bindings} | {r.namespace for r in grants.roles} == {"vcluster-bob-dev"}
