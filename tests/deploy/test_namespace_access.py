"""No function reads Secrets cluster-wide, install included: the manifests hold what
``shared.steps.access`` binds in each Tenant's namespace, bind it nowhere themselves, give install
``bind`` on exactly those ClusterRoles and, through its own one there, every rule of the Roles
it makes (Kubernetes' escalation check), as read from the files of ``deploy/base/rbac``."""

from __future__ import annotations

from typing import Any

import pytest

from shared.model.naming import DEFAULT_TENANT_NAMESPACE
from shared.model.rbac import Rule
from shared.model.tenant import Tenant
from shared.steps import access

from .manifests import EVENTING, RBAC, documents

NAMESPACE_SERVICES = (
    "tenant-install",
    "tenant-check-ready",
    "tenant-store-kubeconfig",
    "tenant-cleanup",
    "tenant-resync",
)
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


def test_each_bound_cluster_role_is_in_its_functions_file() -> None:
    for service in access.BOUND:
        in_file = {doc["metadata"]["name"] for doc in documents((RBAC / f"{service}.yaml").read_text())}
        assert access.cluster_role(service) in in_file, service


def test_no_manifest_binds_the_namespace_cluster_roles() -> None:
    """Only install binds them, one Tenant namespace at a time."""
    runtime_only = {access.cluster_role(service) for service in access.BOUND}
    bindings = [doc for doc in rbac_documents() if doc["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert [b["metadata"]["name"] for b in bindings if b["roleRef"]["name"] in runtime_only] == []


def test_no_identity_holds_a_secret_rule_cluster_wide() -> None:
    """Every ClusterRoleBinding of deploy/ (the functions', sender identity's, the
    ApiServerSource's), whoever its subjects are: no Secret in the ClusterRole it binds."""
    docs = rbac_documents() + documents((EVENTING / "apiserversource-rbac.yaml").read_text(encoding="utf-8"))
    roles = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "ClusterRole"}
    bindings = [doc for doc in docs if doc["kind"] == "ClusterRoleBinding"]
    assert bindings, "the files hold ClusterRoleBindings to check"
    for binding in bindings:
        granted = roles[binding["roleRef"]["name"]]
        secret_rules = [rule for rule in granted["rules"] if {"secrets", "*"} & set(rule["resources"])]
        assert secret_rules == [], f"{binding['metadata']['name']} grants Secrets cluster-wide"


def test_install_binds_exactly_the_cluster_roles_it_grants_in_a_namespace() -> None:
    install = rules_of(cluster_roles()["kubeopera-tenants:tenant-install"])
    binds = [rule for rule in install if "bind" in rule.verbs]
    assert binds == [
        Rule(
            ("rbac.authorization.k8s.io",),
            ("clusterroles",),
            ("bind",),
            tuple(access.cluster_role(service) for service in access.BOUND),
        )
    ]
    bound = {b.role_ref.name for b in access.namespace_grants(TENANT, DEFAULT_TENANT_NAMESPACE).bindings}
    assert {name for name in bound if name.endswith(":vcluster-namespace")} == set(binds[0].resource_names)
    assert not any({"escalate", "impersonate"} & set(rule.verbs) for rule in install)
    # and it may make, check, put back and remake its own binding before it holds anything there
    rbac_group = ("rbac.authorization.k8s.io",)
    assert covers(install, Rule(rbac_group, ("rolebindings",), ("get", "create", "patch", "delete")))
    # but nothing else cluster-wide: no Secret, no chart kind (the ServiceCIDRs, read at start, are
    # cluster-scoped: shared/model/service_range.py)
    resources = {resource for rule in install for resource in rule.resources}
    assert resources == {"namespaces", "rolebindings", "clusterroles", "servicecidrs"}


def test_install_holds_in_a_namespace_every_rule_of_the_roles_it_makes_there() -> None:
    """Roles are subject to the escalation check (``bind`` is only for the ClusterRoles): install's
    own ClusterRole there holds what the Role it makes for store-kubeconfig and resync grants, and may make,
    check and put back Roles."""
    own = rules_of(cluster_roles()[access.cluster_role("tenant-install")])
    grants = access.namespace_grants(TENANT, DEFAULT_TENANT_NAMESPACE)
    granted = [Rule(r.api_groups, r.resources, r.verbs) for role in grants.roles for r in role.rules]
    assert granted and [rule for rule in granted if not covers(own, rule)] == []
    assert covers(own, Rule(("rbac.authorization.k8s.io",), ("roles",), ("get", "create", "patch")))
    # what access.await_in_force asks for is in it
    assert covers(own, Rule(("",), ("secrets",), ("get",)))


def test_what_install_makes_in_a_namespace_binds_these_service_accounts_there_only() -> None:
    grants = access.namespace_grants(TENANT, DEFAULT_TENANT_NAMESPACE)
    subjects = {(s.kind, s.namespace, s.name) for b in grants.bindings for s in b.subjects}
    assert subjects == {("ServiceAccount", DEFAULT_TENANT_NAMESPACE, service) for service in NAMESPACE_SERVICES}
    for service in NAMESPACE_SERVICES:  # each is the ServiceAccount of its own file
        (account,) = [d for d in documents((RBAC / f"{service}.yaml").read_text()) if d["kind"] == "ServiceAccount"]
        assert (account["metadata"]["namespace"], account["metadata"]["name"]) == (DEFAULT_TENANT_NAMESPACE, service)
    assert {b.namespace for b in grants.bindings} | {r.namespace for r in grants.roles} == {"vcluster-bob-dev"}
    assert grants.bindings[0].subjects[0].name == "tenant-install", "install's own first"
    for role in grants.roles:  # by name: what they read has one
        assert all(rule.resource_names for rule in role.rules), role.name
