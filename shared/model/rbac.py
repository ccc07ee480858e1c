"""Roles and RoleBindings as values, in the form ``shared.adapters.kube`` reads and writes them.

install grants the other functions their access in a Tenant's namespace with these
(``shared.steps.access``). Equality compares only what RBAC acts on (rules, roleRef, subjects, and
which object it is), never labels or the resourceVersion read, so "is it as it should be" is
``found == wanted`` and ``has_labels(found.labels, wanted.labels)``. ``manifest()`` is the object
as the API server takes it; ``of()`` reads one back from its JSON form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

RBAC_API_GROUP = "rbac.authorization.k8s.io"
RBAC_API_VERSION = f"{RBAC_API_GROUP}/v1"


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value or ())


def has_labels(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    """Does an object carry every one of ``wanted`` (other labels may be there too)?"""
    return not label_drift(labels, wanted)


def label_drift(labels: Mapping[str, str], wanted: Mapping[str, str]) -> list[str]:
    """The keys of ``wanted`` that ``labels`` lacks or holds with another value, sorted."""
    return sorted(k for k, v in wanted.items() if labels.get(k) != v)


@dataclass(frozen=True)
class Rule:
    """One PolicyRule; ``resource_names`` empty means every object of those resources."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def manifest(self) -> dict[str, list[str]]:
        out = {"apiGroups": list(self.api_groups), "resources": list(self.resources), "verbs": list(self.verbs)}
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        return out

    @classmethod
    def of(cls, rule: Mapping[str, Any]) -> Rule:
        return cls(
            _strings(rule.get("apiGroups")),
            _strings(rule.get("resources")),
            _strings(rule.get("verbs")),
            _strings(rule.get("resourceNames")),
        )


@dataclass(frozen=True)
class Subject:
    """Who a binding grants to: here always a ServiceAccount."""

    name: str
    namespace: str
    kind: str = "ServiceAccount"

    def manifest(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "namespace": self.namespace}


@dataclass(frozen=True)
class RoleRef:
    """What a binding grants: a Role of its namespace or a ClusterRole (immutable once made)."""

    kind: str
    name: str


def _metadata(namespace: str, name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


@dataclass(frozen=True)
class Role:
    namespace: str
    name: str
    rules: tuple[Rule, ...]
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    resource_version: str = field(default="", compare=False)

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": RBAC_API_VERSION,
            "kind": "Role",
            "metadata": _metadata(self.namespace, self.name, self.labels),
            "rules": [rule.manifest() for rule in self.rules],
        }

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Role:
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            rules=tuple(Rule.of(rule) for rule in obj.get("rules") or ()),
            labels=dict(meta.get("labels") or {}),
            resource_version=str(meta.get("resourceVersion", "")),
        )


@dataclass(frozen=True)
class RoleBinding:
    namespace: str
    name: str
    role_ref: RoleRef
    subjects: tuple[Subject, ...]
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    resource_version: str = field(default="", compare=False)

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": RBAC_API_VERSION,
            "kind": "RoleBinding",
            "metadata": _metadata(self.namespace, self.name, self.labels),
            "roleRef": {"apiGroup": RBAC_API_GROUP, "kind": self.role_ref.kind, "name": self.role_ref.name},
            "subjects": [subject.manifest() for subject in self.subjects],
        }

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> RoleBinding:
        meta = obj.get("metadata") or {}
        ref = obj.get("roleRef") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            role_ref=RoleRef(str(ref.get("kind", "")), str(ref.get("name", ""))),
            subjects=tuple(
                Subject(str(s.get("name", "")), str(s.get("namespace", "")), str(s.get("kind", "")))
                for s in obj.get("subjects") or ()
            ),
            labels=dict(meta.get("labels") or {}),
            resource_version=str(meta.get("resourceVersion", "")),
        )
