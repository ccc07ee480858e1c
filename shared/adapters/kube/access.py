"""Roles and RoleBindings in a Tenant's namespace (``shared.steps.access``), what we may do there
(a SelfSubjectAccessReview), and the TokenReview of a sender's token (``shared.delivery.senders``).
"""

from __future__ import annotations

from typing import Any

from shared.adapters.kube.calls import Apis, call, created, found_or_none, precondition, unless_absent
from shared.adapters.kube.client import k8s
from shared.delivery.senders import Review
from shared.model.rbac import Role, RoleBinding


class Access(Apis):
    """RBAC in a Tenant's namespace, access reviews and token reviews."""


    def get_role(self, namespace: str, name: str) -> Role | None:
        what = f"get role {namespace}/{name}"
        found = found_or_none(what, lambda: self._rbac.read_namespaced_role(name, namespace))
        return None if found is None else Role.of(self._as_json(found))

    def get_role_binding(self, namespace: str, name: str) -> RoleBinding | None:
        found = found_or_none(
            f"get rolebinding {namespace}/{name}", lambda: self._rbac.read_namespaced_role_binding(name, namespace)
        )
        return None if found is None else RoleBinding.of(self._as_json(found))

    def _as_json(self, obj: object) -> dict[str, Any]:
        """A client object as the API server's JSON has it (camelCase keys)."""
        return dict(self._api.sanitize_for_serialization(obj))

    def create_role(self, role: Role) -> bool:
        """Create ``role``; False if one of its name exists already (then nothing changed)."""
        return created(
            f"create role {role.namespace}/{role.name}",
            lambda: self._rbac.create_namespaced_role(role.namespace, role.manifest()),
        )

    def create_role_binding(self, binding: RoleBinding) -> bool:
        """Create ``binding``; False if one of its name exists already (then nothing changed)."""
        return created(
            f"create rolebinding {binding.namespace}/{binding.name}",
            lambda: self._rbac.create_namespaced_role_binding(binding.namespace, binding.manifest()),
        )

    def patch_role(self, role: Role, resource_version: str) -> None:
        """Give the version we read ``role``'s rules and labels (``Conflict`` if it moved on)."""
        body = {
            "metadata": {"labels": dict(role.labels), "resourceVersion": resource_version},
            "rules": [rule.manifest() for rule in role.rules],
        }
        call(
            f"patch role {role.namespace}/{role.name}",
            lambda: self._rbac.patch_namespaced_role(role.name, role.namespace, body),
        )

    def patch_role_binding(self, binding: RoleBinding, resource_version: str) -> None:
        """Give the version we read ``binding``'s subjects and labels (``Conflict`` if it moved on).
        Its roleRef cannot change: for that, ``delete_role_binding`` and create it again."""
        body = {
            "metadata": {"labels": dict(binding.labels), "resourceVersion": resource_version},
            "subjects": [subject.manifest() for subject in binding.subjects],
        }
        call(
            f"patch rolebinding {binding.namespace}/{binding.name}",
            lambda: self._rbac.patch_namespaced_role_binding(binding.name, binding.namespace, body),
        )

    def delete_role_binding(self, namespace: str, name: str, resource_version: str) -> None:
        """Delete the version we read; absent is fine, changed is ``Conflict``."""
        options = precondition(resource_version)
        unless_absent(
            f"delete rolebinding {namespace}/{name}",
            lambda: self._rbac.delete_namespaced_role_binding(name, namespace, body=options),
        )

    def allowed(self, namespace: str, verb: str, group: str, resource: str) -> bool:
        """Does the API server let this client ``verb`` ``resource`` in ``namespace`` now (a
        SelfSubjectAccessReview, which every authenticated user may make)? RBAC's answer from
        the same cache its escalation check reads: a RoleBinding just made is in it or not yet."""
        attributes = k8s.V1ResourceAttributes(namespace=namespace, verb=verb, group=group, resource=resource)
        body = k8s.V1SelfSubjectAccessReview(spec=k8s.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes))
        review = call(
            f"create selfsubjectaccessreview {verb} {resource} in {namespace}",
            lambda: self._authorization.create_self_subject_access_review(body),
        )
        return bool(review.status is not None and review.status.allowed)


    def review_token(self, token: str, audience: str) -> Review:
        """What the API server says of a bearer token meant for ``audience`` (a TokenReview)."""
        body = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token, audiences=[audience]))
        status = call("create tokenreview", lambda: self._authentication.create_token_review(body)).status
        user = status.user if status is not None else None
        return Review(
            authenticated=bool(status is not None and status.authenticated),
            username=str(user.username or "") if user is not None else "",
            audiences=tuple(status.audiences or ()) if status is not None else (),
        )

