"""The one adapter to the Kubernetes API (the only runtime module that imports ``kubernetes``).

It speaks in this project's values (``Tenant``, ``StatusUpdate``, ``TenantEvent``, ``Rollout``,
``StoredSecret``) and errors: a 409 becomes ``Conflict``; 429, 5xx and connection failures
become ``TemporaryError``; a 403 for a namespace being deleted is ``NamespaceTerminating``
(temporary); other 401/403 become ``Forbidden``, a ``PermanentError`` (a missing RBAC rule does
not heal by retrying; the message names the verb and resource; the callers that read where
install grants access at run time make it temporary, ``shared.steps.access``), and so do 400/422 (the
object we sent is invalid); a write to a Tenant that is gone is ``TenantGone``. Writes are guarded by the
resourceVersion that was read. Secret contents never appear in an error message or a log line.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import logging
import os
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from shared.adapters.release import SecretMeta
from shared.delivery.senders import Review
from shared.errors import Conflict, Forbidden, NamespaceTerminating, PermanentError, TemporaryError, TenantGone
from shared.model.cluster import LeaseHold, Marker, NamespaceInfo, OwnedNamespace, Rollout, StoredSecret, Volume
from shared.model.isolation import CHART_SELECTOR, PolicyObject
from shared.model.naming import LABEL_OWNER_UID
from shared.model.rbac import Role, RoleBinding
from shared.model.tenant import (
    API_VERSION,
    FINALIZER,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    StatusUpdate,
    Tenant,
    TenantEvent,
    rfc3339,
    utcnow,
)
from shared.observability import tracing

log = logging.getLogger(__name__)
T = TypeVar("T")


# The pod-template annotation ``kubectl rollout restart`` sets: its change rolls the pods.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
# The conditions the namespace controller sets on a namespace it is deleting, True while it waits.
NAMESPACE_DELETION_CONDITIONS = (
    "NamespaceContentRemaining",
    "NamespaceFinalizersRemaining",
    "NamespaceDeletionContentFailure",
    "NamespaceDeletionDiscoveryFailure",
    "NamespaceDeletionGroupVersionParsingFailure",
)



def _api_message(err: ApiException) -> str:
    """The Status message of an API error (never a request body, so never a secret)."""
    try:
        return str(json.loads(err.body or "{}").get("message", ""))[:300]
    except ValueError:
        return ""


def _call(what: str, fn: Callable[[], T]) -> T:
    """One API request, in a client span (``k8s <verb> <resource>``), its failure classified."""
    verb, _, rest = what.partition(" ")
    with tracing.client_span(f"k8s {verb} {rest.split(' ')[0]}", {"k8s.request": what}):
        return _classified(what, fn)


def _classified(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as err:
        status = int(err.status or 0)
        reason = err.reason or ""
        if status == 409:
            raise Conflict(f"{what}: conflict ({reason})") from None
        if status == 403 and "because it is being terminated" in _api_message(err):
            raise NamespaceTerminating(f"{what}: the namespace is being deleted", retry_after=2) from None
        if status in (401, 403):
            # Permanent on purpose: a rule missing from deploy/ does not heal by retrying, and the
            # Tenant is better Failed at once with the verb and resource named than re-delivered
            # until the broker gives up. The one 403 that heals is a read in a Tenant's vcluster-*
            # namespace, where install grants the other functions their access at run time
            # (shared.steps.access): a RoleBinding just made counts only once the API server's RBAC
            # cache has it, and a Tenant of an earlier version gets its bindings on its next
            # install delivery. Only those callers know that they read there, so they turn this
            # Forbidden into a TemporaryError themselves (access.granted_at_run_time).
            raise Forbidden(f"{what}: the API server refused it ({status} {reason})") from None
        if status in (400, 422):
            raise PermanentError(f"{what}: the API server found it invalid ({status}): {_api_message(err)}") from None
        if status == 429 or status >= 500 or status == 0:
            raise TemporaryError(f"{what}: API server answered {status} {reason}", retry_after=2) from None
        raise
    except (urllib3.exceptions.HTTPError, OSError) as err:
        raise TemporaryError(f"{what}: API server unreachable ({type(err).__name__})", retry_after=2) from None


class Kube:
    """Typed operations on Tenants, Namespaces and Secrets."""

    def __init__(self, api_client: k8s.ApiClient, component: str = "kubeopera-tenants") -> None:
        self._api = api_client
        self._component = component  # who reports the Events it records
        # The client's generated types are loose (objects and optionals everywhere); the adapter
        # treats answers as Any and converts them to this project's values right here.
        self._core: Any = k8s.CoreV1Api(api_client)
        self._custom: Any = k8s.CustomObjectsApi(api_client)
        self._coordination: Any = k8s.CoordinationV1Api(api_client)
        self._apps: Any = k8s.AppsV1Api(api_client)
        self._authentication: Any = k8s.AuthenticationV1Api(api_client)
        self._rbac: Any = k8s.RbacAuthorizationV1Api(api_client)
        self._authorization: Any = k8s.AuthorizationV1Api(api_client)
        self._networking: Any = k8s.NetworkingV1Api(api_client)

    @classmethod
    def connect(cls, kubeconfig: Path | None = None, component: str = "kubeopera-tenants") -> Self:
        """In-cluster credentials inside a pod; otherwise ``kubeconfig`` or ``$KUBECONFIG``."""
        configuration = k8s.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig else None, client_configuration=configuration
            )
        return cls(k8s.ApiClient(configuration), component)

    def close(self) -> None:
        self._api.close()

    # Tenants -----------------------------------------------------------------------------

    def get_tenant(self, namespace: str, name: str) -> Tenant | None:
        obj = _found_or_none(
            f"get tenant {namespace}/{name}",
            lambda: self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
        )
        return None if obj is None else Tenant.from_object(obj)

    def list_tenants(self, namespace: str, field_selector: str) -> list[Tenant]:
        """Tenants in ``namespace`` matching a field selector on the CRD's selectable fields
        (``spec.tenantName``, ``spec.cloudSpaceID``)."""
        items = _listed(
            f"list tenants {field_selector}",
            functools.partial(
                self._custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                field_selector=field_selector,
            ),
        )
        return [Tenant.from_object(item) for item in items]

    def list_tenant_objects(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace:
            return _listed(
                "list tenants",
                functools.partial(self._custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL),
            )
        return _listed(
            "list tenants", functools.partial(self._custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
        )

    def patch_tenant_status(self, tenant: Tenant, update: StatusUpdate) -> Tenant:
        """Apply ``update`` to the version of ``tenant`` we read; ``Conflict`` if it moved on,
        ``TenantGone`` if it was deleted meanwhile."""
        return self._patch_tenant(tenant, f"patch tenant {tenant.key} status", update.patch_for(tenant), status=True)

    def set_finalizer(self, tenant: Tenant, present: bool) -> Tenant:
        """Add or remove this project's finalizer on the version of ``tenant`` we read."""
        others = [f for f in tenant.finalizers if f != FINALIZER]
        finalizers = [*others, FINALIZER] if present else others
        body = {"metadata": {"resourceVersion": tenant.resource_version, "finalizers": finalizers}}
        verb = "add" if present else "remove"
        return self._patch_tenant(tenant, f"{verb} finalizer on tenant {tenant.key}", body, status=False)

    def _patch_tenant(self, tenant: Tenant, what: str, body: Mapping[str, Any], *, status: bool) -> Tenant:
        patch = (
            self._custom.patch_namespaced_custom_object_status
            if status
            else self._custom.patch_namespaced_custom_object
        )
        try:
            obj = _call(what, lambda: patch(GROUP, VERSION, tenant.namespace, PLURAL, tenant.name, dict(body)))
        except ApiException as err:
            if err.status == 404:
                raise TenantGone(f"tenant {tenant.key} was deleted meanwhile") from None
            raise
        return Tenant.from_object(obj)

    # Events -------------------------------------------------------------------------------

    def record_event(self, tenant: Tenant, event: TenantEvent) -> None:
        """A Kubernetes Event on the Tenant (``kubectl describe kt`` shows it). The same reason
        and message again folds into the first one's ``count``, as kubelet's events do. Never
        raises: an Event is worth a warning in the log, not a failed delivery."""
        digest = hashlib.sha256(f"{tenant.uid}/{event.reason}/{event.message}".encode()).hexdigest()[:16]
        name = f"{tenant.name}.{digest}"
        now = rfc3339(utcnow())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": tenant.namespace},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "namespace": tenant.namespace,
                "name": tenant.name,
                "uid": tenant.uid,
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:1024],
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self._component},
            "reportingComponent": f"kubeopera.io/{self._component}",
            "reportingInstance": socket.gethostname()[:128],
        }
        try:
            try:
                _call(f"create event {name}", lambda: self._core.create_namespaced_event(tenant.namespace, body))
                return
            except Conflict:
                pass
            current = _call(f"get event {name}", lambda: self._core.read_namespaced_event(name, tenant.namespace))
            patch = {
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "count": int(current.count or 1) + 1,
                "lastTimestamp": now,
            }
            _call(f"patch event {name}", lambda: self._core.patch_namespaced_event(name, tenant.namespace, patch))
        except (TemporaryError, PermanentError, ApiException) as err:
            log.warning("could not record a Kubernetes Event", extra={"reason": event.reason, "error": str(err)})

    # Namespaces ---------------------------------------------------------------------------

    def get_namespace(self, name: str) -> NamespaceInfo | None:
        """The namespace's labels and whether it is being deleted, or None if there is none."""
        current = _found_or_none(f"get namespace {name}", lambda: self._core.read_namespace(name))
        if current is None:
            return None
        conditions = (current.status.conditions or []) if current.status is not None else []
        remaining = "; ".join(
            str(c.message) for c in conditions if c.type in NAMESPACE_DELETION_CONDITIONS and c.status == "True"
        )
        return NamespaceInfo(
            dict(current.metadata.labels or {}), current.metadata.deletion_timestamp is not None, remaining
        )

    def list_owned_namespaces(self) -> list[OwnedNamespace]:
        """Every namespace that names a Tenant as its owner (label ``kubeopera.io/owner-uid``):
        one LIST, a page of ``PAGE`` at a time, however many there are."""
        listed = _listed(
            "list namespaces", functools.partial(self._core.list_namespace, label_selector=LABEL_OWNER_UID)
        )
        return [
            OwnedNamespace(
                ns["metadata"]["name"],
                dict(ns["metadata"].get("labels") or {}),
                datetime.fromisoformat(ns["metadata"]["creationTimestamp"]),
                ns["metadata"].get("deletionTimestamp") is not None,
            )
            for ns in listed
        ]

    def create_namespace(self, name: str, labels: Mapping[str, str]) -> bool:
        """Create the namespace with ``labels``; False if it exists already (then nothing changed)."""
        body = k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels=dict(labels)))
        try:
            _call(f"create namespace {name}", lambda: self._core.create_namespace(body))
        except Conflict:
            return False
        log.info("namespace created", extra={"namespace": name})
        return True

    def label_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        patch = {"metadata": {"labels": dict(labels)}}
        _call(f"label namespace {name}", lambda: self._core.patch_namespace(name, patch))

    def delete_namespace(self, name: str) -> None:
        """Start the namespace's deletion (its objects and PVCs go with it); absent is fine."""
        with contextlib.suppress(Conflict):  # 409: its deletion is already under way
            _unless_absent(f"delete namespace {name}", lambda: self._core.delete_namespace(name))

    # StatefulSets -------------------------------------------------------------------------

    def get_rollout(self, namespace: str, name: str) -> Rollout | None:
        """The rollout of StatefulSet ``name`` (the vCluster control plane), None if there is none."""
        sts = _found_or_none(
            f"get statefulset {namespace}/{name}",
            lambda: _json(self._apps.read_namespaced_stateful_set(name, namespace, _preload_content=False)),
        )
        if sts is None:
            return None
        spec, status = sts.get("spec", {}), sts.get("status", {})
        return Rollout(
            generation=int(sts["metadata"].get("generation") or 0),
            observed_generation=int(status.get("observedGeneration") or 0),
            replicas=int(spec["replicas"] if spec.get("replicas") is not None else 1),
            ready_replicas=int(status.get("readyReplicas") or 0),
            updated_replicas=int(status.get("updatedReplicas") or 0),
        )

    def restart_rollout(self, namespace: str, name: str, at: str) -> int | None:
        """Restart StatefulSet ``name``'s pods as ``kubectl rollout restart`` does (the pod
        template's ``kubectl.kubernetes.io/restartedAt`` set to ``at``: a new generation, whose pods
        replace the old); return that generation, None if there is no such StatefulSet. Helm's
        three-way merge keeps the annotation on later upgrades."""
        body = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: at}}}}}
        sts = _found_or_none(
            f"restart statefulset {namespace}/{name}",
            lambda: self._apps.patch_namespaced_stateful_set(name, namespace, body),
        )
        return None if sts is None else int(sts.metadata.generation or 0)

    # Leases -------------------------------------------------------------------------------

    def acquire_lease(self, namespace: str, name: str, holder: str, seconds: int) -> str | None:
        """Hold Lease ``name`` for ``seconds`` if it is free, expired or already ``holder``'s;
        return the resourceVersion of our hold (for ``release_lease``), None if someone else has it."""
        now = datetime.now(UTC)
        spec = k8s.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=seconds, acquire_time=now, renew_time=now)
        body: Any = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace), spec=spec)
        try:
            made = _call(
                f"create lease {namespace}/{name}", lambda: self._coordination.create_namespaced_lease(namespace, body)
            )
            return str(made.metadata.resource_version)
        except Conflict:
            pass
        current = _call(
            f"get lease {namespace}/{name}", lambda: self._coordination.read_namespaced_lease(name, namespace)
        )
        hold = LeaseHold(
            holder=str(current.spec.holder_identity or ""),
            renewed=current.spec.renew_time or current.spec.acquire_time,
            duration_seconds=int(current.spec.lease_duration_seconds or 0),
        )
        if not hold.free_for(holder, now):
            return None
        body.metadata.resource_version = current.metadata.resource_version
        try:
            taken = _call(
                f"take over lease {namespace}/{name}",
                lambda: self._coordination.replace_namespaced_lease(name, namespace, body),
            )
        except Conflict:
            return None  # someone else took it first
        return str(taken.metadata.resource_version)

    def release_lease(self, namespace: str, name: str, resource_version: str) -> None:
        """Give up our hold (the version ``acquire_lease`` returned); gone or taken over is fine."""
        options = _precondition(resource_version)
        with contextlib.suppress(Conflict):  # expired and taken over by another holder: theirs now
            _unless_absent(
                f"delete lease {namespace}/{name}",
                lambda: self._coordination.delete_namespaced_lease(name, namespace, body=options),
            )

    # The chart's namespace policies (shared.model.isolation) ----------------------------------------

    def list_policy_objects(self, namespace: str | None = None) -> set[tuple[str, PolicyObject]]:
        """(namespace, object) of every ResourceQuota, LimitRange and NetworkPolicy the chart
        rendered (``CHART_SELECTOR``), in ``namespace`` or, with None, in every namespace: three
        LISTs, a page of ``PAGE`` at a time, however many Tenants there are."""
        kinds: tuple[tuple[str, Callable[..., Any], Callable[..., Any]], ...] = (
            (
                "ResourceQuota",
                self._core.list_resource_quota_for_all_namespaces,
                functools.partial(self._core.list_namespaced_resource_quota, namespace),
            ),
            (
                "LimitRange",
                self._core.list_limit_range_for_all_namespaces,
                functools.partial(self._core.list_namespaced_limit_range, namespace),
            ),
            (
                "NetworkPolicy",
                self._networking.list_network_policy_for_all_namespaces,
                functools.partial(self._networking.list_namespaced_network_policy, namespace),
            ),
        )
        found: set[tuple[str, PolicyObject]] = set()
        for kind, everywhere, here in kinds:
            items = _listed(
                f"list {kind.lower()} {namespace or '(all namespaces)'}",
                functools.partial(here if namespace else everywhere, label_selector=CHART_SELECTOR),
            )
            found |= {(str(i["metadata"]["namespace"]), PolicyObject(kind, str(i["metadata"]["name"]))) for i in items}
        return found

    # PersistentVolumes a Tenant's claims were bound to (functions.cleanup) --------------------

    def volumes_claimed_in(self, namespace: str) -> list[Volume]:
        """Every PersistentVolume whose ``claimRef`` is in ``namespace`` (one LIST of the
        cluster's volumes: a claim reference cannot be selected on)."""
        result = _call("list persistentvolumes", lambda: self._core.list_persistent_volume())
        return [
            Volume(
                name=str(i.metadata.name),
                claim=f"{i.spec.claim_ref.namespace}/{i.spec.claim_ref.name}",
                reclaim_policy=str(i.spec.persistent_volume_reclaim_policy or ""),
                phase=str((i.status.phase if i.status else None) or ""),
                resource_version=str(i.metadata.resource_version),
            )
            for i in result.items
            if i.spec.claim_ref is not None and i.spec.claim_ref.namespace == namespace
        ]

    def delete_volume(self, name: str, resource_version: str) -> None:
        """Delete the version read; gone already is fine."""
        _unless_absent(
            f"delete persistentvolume {name}",
            lambda: self._core.delete_persistent_volume(name, body=_precondition(resource_version)),
        )

    # The host's Service range (shared.model.service_range) ----------------------------------------

    def service_cidrs(self) -> list[tuple[str, list[str]]] | None:
        """(name, cidrs) of each ServiceCIDR (networking.k8s.io/v1); None when the API server
        serves none (before Kubernetes 1.33: 404)."""
        try:
            result = _call("list servicecidrs", lambda: self._networking.list_service_cidr())
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return [(str(i.metadata.name), [str(c) for c in (i.spec.cidrs or [])]) for i in result.items]

    # Claims (shared.steps.claims: one cloudSpaceID, one Tenant) ------------------------------------

    def create_claim(self, tenant: Tenant, name: str, labels: Mapping[str, str]) -> bool:
        """Create Lease ``name`` in the Tenant's namespace, held by the Tenant and owned by it (the
        garbage collector removes it with the Tenant); False if one of that name exists already."""
        meta = k8s.V1ObjectMeta(
            name=name,
            namespace=tenant.namespace,
            labels=dict(labels),
            owner_references=[
                k8s.V1OwnerReference(api_version=API_VERSION, kind=KIND, name=tenant.name, uid=tenant.uid)
            ],
        )
        body: Any = k8s.V1Lease(metadata=meta, spec=k8s.V1LeaseSpec(holder_identity=tenant.key))
        return _created(
            f"create lease {tenant.namespace}/{name}",
            lambda: self._coordination.create_namespaced_lease(tenant.namespace, body),
        )

    def get_claim(self, namespace: str, name: str) -> Marker | None:
        found = _found_or_none(
            f"get lease {namespace}/{name}", lambda: self._coordination.read_namespaced_lease(name, namespace)
        )
        if found is None:
            return None
        return Marker(dict(found.metadata.labels or {}), str(found.metadata.resource_version))

    def delete_claim(self, namespace: str, name: str, resource_version: str) -> None:
        """Delete the version read; gone already, or changed meanwhile (409), is left as it is."""
        with contextlib.suppress(Conflict):
            _unless_absent(
                f"delete lease {namespace}/{name}",
                lambda: self._coordination.delete_namespaced_lease(
                    name, namespace, body=_precondition(resource_version)
                ),
            )

    # RBAC in a Tenant's namespace (shared.steps.access) ------------------------------------------

    def get_role(self, namespace: str, name: str) -> Role | None:
        what = f"get role {namespace}/{name}"
        found = _found_or_none(what, lambda: self._rbac.read_namespaced_role(name, namespace))
        return None if found is None else Role.of(self._as_json(found))

    def get_role_binding(self, namespace: str, name: str) -> RoleBinding | None:
        found = _found_or_none(
            f"get rolebinding {namespace}/{name}", lambda: self._rbac.read_namespaced_role_binding(name, namespace)
        )
        return None if found is None else RoleBinding.of(self._as_json(found))

    def _as_json(self, obj: object) -> dict[str, Any]:
        """A client object as the API server's JSON has it (camelCase keys)."""
        return dict(self._api.sanitize_for_serialization(obj))

    def create_role(self, role: Role) -> bool:
        """Create ``role``; False if one of its name exists already (then nothing changed)."""
        return _created(
            f"create role {role.namespace}/{role.name}",
            lambda: self._rbac.create_namespaced_role(role.namespace, role.manifest()),
        )

    def create_role_binding(self, binding: RoleBinding) -> bool:
        """Create ``binding``; False if one of its name exists already (then nothing changed)."""
        return _created(
            f"create rolebinding {binding.namespace}/{binding.name}",
            lambda: self._rbac.create_namespaced_role_binding(binding.namespace, binding.manifest()),
        )

    def patch_role(self, role: Role, resource_version: str) -> None:
        """Give the version we read ``role``'s rules and labels (``Conflict`` if it moved on)."""
        body = {
            "metadata": {"labels": dict(role.labels), "resourceVersion": resource_version},
            "rules": [rule.manifest() for rule in role.rules],
        }
        _call(
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
        _call(
            f"patch rolebinding {binding.namespace}/{binding.name}",
            lambda: self._rbac.patch_namespaced_role_binding(binding.name, binding.namespace, body),
        )

    def delete_role_binding(self, namespace: str, name: str, resource_version: str) -> None:
        """Delete the version we read; absent is fine, changed is ``Conflict``."""
        options = _precondition(resource_version)
        _unless_absent(
            f"delete rolebinding {namespace}/{name}",
            lambda: self._rbac.delete_namespaced_role_binding(name, namespace, body=options),
        )

    def allowed(self, namespace: str, verb: str, group: str, resource: str) -> bool:
        """Does the API server let this client ``verb`` ``resource`` in ``namespace`` now (a
        SelfSubjectAccessReview, which every authenticated user may make)? RBAC's answer from
        the same cache its escalation check reads: a RoleBinding just made is in it or not yet."""
        attributes = k8s.V1ResourceAttributes(namespace=namespace, verb=verb, group=group, resource=resource)
        body = k8s.V1SelfSubjectAccessReview(spec=k8s.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes))
        review = _call(
            f"create selfsubjectaccessreview {verb} {resource} in {namespace}",
            lambda: self._authorization.create_self_subject_access_review(body),
        )
        return bool(review.status is not None and review.status.allowed)

    # Sender identity ----------------------------------------------------------------------

    def review_token(self, token: str, audience: str) -> Review:
        """What the API server says of a bearer token meant for ``audience`` (a TokenReview)."""
        body = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token, audiences=[audience]))
        status = _call("create tokenreview", lambda: self._authentication.create_token_review(body)).status
        user = status.user if status is not None else None
        return Review(
            authenticated=bool(status is not None and status.authenticated),
            username=str(user.username or "") if user is not None else "",
            audiences=tuple(status.audiences or ()) if status is not None else (),
        )

    # Secrets ------------------------------------------------------------------------------

    def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        """The decoded value of one key of a Secret, or None if the Secret or key is absent."""
        secret = self.get_secret(namespace, name)
        return (secret.data.get(key) or None) if secret is not None else None

    def list_secret_records(self, namespace: str, label_selector: str) -> list[SecretMeta]:
        """The name, type and labels of each Secret in ``namespace`` matching the selector (helm's
        release record, ``shared.adapters.release``; the data is dropped unread); a 403 is ``Forbidden``."""
        result = _call(
            f"list secrets {namespace} {label_selector}",
            lambda: self._core.list_namespaced_secret(namespace, label_selector=label_selector),
        )
        return [
            SecretMeta(name=str(i.metadata.name), type=str(i.type or ""), labels=dict(i.metadata.labels or {}))
            for i in result.items
        ]

    def get_secret(self, namespace: str, name: str) -> StoredSecret | None:
        secret = _found_or_none(
            f"get secret {namespace}/{name}",
            lambda: _json(self._core.read_namespaced_secret(name, namespace, _preload_content=False)),
        )
        if secret is None:
            return None
        return StoredSecret(
            labels=dict(secret["metadata"].get("labels") or {}),
            data={k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()},
            resource_version=str(secret["metadata"]["resourceVersion"]),
        )

    def write_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        labels: Mapping[str, str],
        resource_version: str | None,
    ) -> None:
        """Create the Opaque Secret (``resource_version`` None) or replace the version we read;
        ``Conflict`` if it was created or changed meanwhile."""
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        meta = k8s.V1ObjectMeta(name=name, namespace=namespace, labels=dict(labels), resource_version=resource_version)
        body: Any = k8s.V1Secret(metadata=meta, type="Opaque", data=dict(encoded))
        if resource_version is None:
            _call(f"create secret {namespace}/{name}", lambda: self._core.create_namespaced_secret(namespace, body))
        else:
            _call(
                f"replace secret {namespace}/{name}",
                lambda: self._core.replace_namespaced_secret(name, namespace, body),
            )

    def delete_secret(self, namespace: str, name: str, resource_version: str) -> None:
        """Delete the version of the Secret we read; absent is fine, changed is ``Conflict``."""
        options = _precondition(resource_version)
        _unless_absent(
            f"delete secret {namespace}/{name}",
            lambda: self._core.delete_namespaced_secret(name, namespace, body=options),
        )


def _created(what: str, fn: Callable[[], object]) -> bool:
    """A create for which "it exists already" (409) is an answer: False. Its namespace gone (404)
    is temporary: whoever deletes it is at work, and the next delivery sees the outcome."""
    try:
        _call(what, fn)
    except Conflict:
        return False
    except ApiException as err:
        if err.status == 404:
            raise TemporaryError(f"{what}: its namespace does not exist", retry_after=2) from None
        raise
    return True


def _unless_absent(what: str, fn: Callable[[], object]) -> None:
    """A delete for which "it is not there" (404) is success."""
    try:
        _call(what, fn)
    except ApiException as err:
        if err.status != 404:
            raise


def _precondition(resource_version: str) -> Any:
    """Delete only the version we read (409 if it changed meanwhile)."""
    return k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(resource_version=resource_version))


# Items per LIST request: a fleet-wide list comes a page at a time (``limit`` and ``continue``),
# never as one answer the size of the fleet, in the API server's memory or ours.
PAGE = 500


def _json(response: Any) -> dict[str, Any]:
    """A response asked for with ``_preload_content=False``: its JSON as is, without the client's
    deserialization into its models (for a StatefulSet, more CPU than the request itself; resync
    reads thousands)."""
    found: dict[str, Any] = json.loads(response.data)
    return found


def _listed(what: str, fetch: Callable[..., Any]) -> list[dict[str, Any]]:
    """Every item of a LIST as JSON, ``PAGE`` at a time: ``fetch`` is called with ``limit``,
    ``_continue`` and ``_preload_content``, until the API server gives no ``continue`` token."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = _call(what, functools.partial(_page, fetch, token))
        items.extend(page.get("items") or [])
        token = page.get("metadata", {}).get("continue") or None
        if token is None:
            return items


def _page(fetch: Callable[..., Any], token: str | None) -> dict[str, Any]:
    return _json(fetch(limit=PAGE, _continue=token, _preload_content=False))


def _found_or_none(what: str, fn: Callable[[], T]) -> T | None:
    """A get for which "it is not there" (404) is an answer: None."""
    try:
        return _call(what, fn)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
