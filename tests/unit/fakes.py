"""Small in-memory stand-ins for the two adapters (``shared.adapters.kube.Kube``, ``shared.adapters.helm.Helm``) and
for kubeopera-api and the broker (resync's ``Sink``), so the functions' decisions run as they are, in
milliseconds. A ``shared.runtime.Runtime`` made of them is what a test gives a function's
``create_app``; ``apiserver_event``, ``step_event`` and ``deliver`` stand for the ApiServerSource,
the router and the broker.

They keep plain data (a Tenant is the dict the API server would return) and answer the way the
real adapters do: Tenants come back as ``Tenant.from_object``, a status write applies
``StatusUpdate.patch_for`` and is refused with ``Conflict`` when the resourceVersion moved on and
with ``TenantGone`` when the Tenant was deleted, Events fold repeats into a count, a helm guard
sees the release's current values. They decide nothing a function decides; every write is
counted and journaled in order, so a test can say what happened and in which order.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import gzip
import json
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.v1.event import CloudEvent
from flask import Flask
from werkzeug.test import TestResponse

from shared.adapters.helm import Guard, Keep
from shared.adapters.kubeopera_api import CallbackResult, CloudSpaceUpdate
from shared.adapters.release import RECORD_TYPE, SecretMeta, SecretRecord, history, record_name, record_selector
from shared.delivery import events
from shared.delivery.senders import Review
from shared.errors import Conflict, NamespaceTerminating, TemporaryError, TenantGone, WorkInHand
from shared.model import event_types
from shared.model.cluster import Marker, NamespaceInfo, OwnedNamespace, Rollout, StoredSecret, Volume
from shared.model.isolation import PolicyObject, policy_objects
from shared.model.naming import DEFAULT_TENANT_NAMESPACE, LABEL_OWNER_UID, VCLUSTER_CONFIG_KEY
from shared.model.rbac import Role, RoleBinding
from shared.model.release import DEPLOYED, PENDING_STATES, ReleaseState
from shared.model.tenant import API_VERSION, FINALIZER, KIND, StatusUpdate, Tenant, TenantEvent, TenantRef
from shared.model.vcluster_watch import Change, Seen
from shared.observability import tracing
from shared.runtime import Runtime
from shared.settings import Settings

TENANT_NAMESPACE = DEFAULT_TENANT_NAMESPACE
USER_ID = "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b"
CHART_VERSION = "0.21.2"
DELETED_AT = "2026-11-30T13:00:00Z"
NAMESPACES_MADE = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # a namespace added by a test, unless it says

# The fields the CRD makes selectable (deploy/crd/tenants.yaml), as list_tenants supports them.
_SELECTABLE = {"spec.tenantName": "tenantName", "spec.cloudSpaceID": "cloudSpaceID"}


def tenant_object(
    name: str,
    cloud_space_id: str,
    *,
    tenant_name: str | None = None,
    namespace: str = TENANT_NAMESPACE,
    uid: str | None = None,
    created: str = "2026-11-30T12:00:00Z",
    status: Mapping[str, Any] | None = None,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    """A Tenant as the API server returns it (before ``FakeKube.add_tenant`` versions it)."""
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": {
            "userID": USER_ID,
            "tenantName": tenant_name or name,
            "cloudSpaceID": cloud_space_id,
            "quota": {"cpu": "2", "memory": "4Gi"},
        },
    }
    if status:
        obj["status"] = dict(status)
    if finalizers:
        obj["metadata"]["finalizers"] = list(finalizers)
    return obj


def in_sync(obj: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The Tenant ``obj`` recorded as running what install computes for it with ``settings`` (status
    ``chartVersion`` and ``valuesDigest``, as install writes them): no fleet change waits for it."""
    from shared.steps.rollout import target

    status = obj.setdefault("status", {})
    status.update(target(Tenant.from_object(obj), settings).status_fields())
    return obj


def ref_of(obj: Mapping[str, Any]) -> TenantRef:
    meta = obj["metadata"]
    return TenantRef(meta["namespace"], meta["name"], meta["uid"], meta.get("generation", 0))


def apiserver_event(obj: dict[str, Any], type_: str = event_types.APISERVER_UPDATE) -> CloudEvent:
    """What the ApiServerSource sends for a Tenant: the whole object as data."""
    meta = obj["metadata"]
    return CloudEvent(
        attributes={
            "type": type_,
            "source": "https://127.0.0.1:6443",
            "subject": f"/apis/kubeopera.io/v1alpha1/namespaces/{meta['namespace']}/tenants/{meta['name']}",
            "datacontenttype": "application/json",
        },
        data=copy.deepcopy(obj),
    )


def step_event(obj: dict[str, Any], type_: str, sender: str = "router") -> CloudEvent:
    """What the router (or resync) sends a step about this Tenant: ``io.kubeopera.tenant.install``
    or ``.cleanup`` with the Tenant's reference, as ``events.make`` writes it."""
    return events.make(type_, sender, ref_of(obj))


def deliver(app: Flask, event: BaseCloudEvent, headers: Mapping[str, str] | None = None) -> TestResponse:
    """POST ``event`` to a function's app as the broker delivers it (binary mode)."""
    event_headers, body = events.to_binary(event)
    return app.test_client().post("/", headers=event_headers | dict(headers or {}), data=body)


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """JSON merge patch (RFC 7386): objects merge, everything else (lists too) is replaced."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


_TALLY = threading.Lock()


def _tally(counter: Counter[str], key: str) -> None:
    """One more ``key``: under a lock, since resync reads Tenants from several threads at once."""
    with _TALLY:
        counter[key] += 1


class FakeKube:
    """The ``Kube`` methods the functions call, on dicts. Set-up helpers (``add_*``, ``delete_tenant``,
    ``set_phase``, ``finish_namespace_deletion``) act as a person or the API server would and are
    neither counted nor journaled."""

    def __init__(self) -> None:
        self.tenants: dict[tuple[str, str], dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, Any]] = {}  # name -> {"labels": {...}, "terminating": bool}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}  # -> {"labels", "data", "resourceVersion"}
        self.events: list[dict[str, Any]] = []  # one per (uid, reason, message); repeats raise "count"
        self.calls: Counter[str] = Counter()  # every adapter method called, reads included
        self.writes: Counter[str] = Counter()  # the write methods called
        self.journal: list[tuple[str, str]] = []  # writes in order (FakeHelm adds its own): (what, on what)
        self.leases: dict[tuple[str, str], str] = {}  # (namespace, name) -> holder; a lock, not in the journal
        self.claims: dict[tuple[str, str], Marker] = {}  # Leases cloudspace-<id> (shared.steps.claims)
        self.rollouts: dict[tuple[str, str], Rollout] = {}  # StatefulSets, as their controller reports them
        self.unlabelled: set[tuple[str, str]] = set()  # StatefulSets no label selector finds (made by hand)
        # The vCluster watch's view: what a LIST returns (at list_version), and each WATCH's
        # events in turn (a Change, or an error raised there); with none left a WATCH calls
        # out_of_watches and ends.
        self.seen: dict[tuple[str, str], Seen] = {}
        self.list_version = "100"
        self.watches: list[list[Change | TemporaryError]] = []
        self.watched_from: list[str] = []  # the resourceVersion each WATCH started at
        self.out_of_watches: Callable[[], None] = lambda: None
        self.service_ranges: list[tuple[str, list[str]]] | None = [("kubernetes", ["10.0.0.0/24"])]
        self.policies: set[tuple[str, PolicyObject]] = set()
        self.volumes: dict[
            str, Volume
        ] = {}  # PersistentVolumes by name  # the chart's namespace policies, made by FakeHelm
        self.roles: dict[tuple[str, str], Role] = {}  # (namespace, name) -> as stored, with its resourceVersion
        self.role_bindings: dict[tuple[str, str], RoleBinding] = {}
        self.helm: FakeHelm | None = None  # whose releases are helm's records here (as its Secrets are)
        # Each Tenant as a write by a function left it: what the ApiServerSource sends as an update.
        self.echoes: list[dict[str, Any]] = []
        self.token_reviews: dict[str, Review] = {}  # token -> what the API server says of it
        self.tenant_page = 100  # Tenants a page of tenant_pages holds (PAGE, as the adapter's LIST)
        self.tenant_pages_read = 0  # pages tenant_pages has handed out (one LIST's requests)
        self._version = 100

    # set-up, as a person or the API server ----------------------------------------------------

    def _next_version(self) -> str:
        """The next resourceVersion: under the lock, since install writes its grants side by side."""
        with _TALLY:
            self._version += 1
            return str(self._version)

    def add_tenant(self, obj: dict[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = self._next_version()
        self.tenants[(stored["metadata"]["namespace"], stored["metadata"]["name"])] = stored
        return copy.deepcopy(stored)

    def tenant_dict(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.tenants.get((namespace, name))
        return None if found is None else copy.deepcopy(found)

    def delete_tenant(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``kubectl delete``: with finalizers the Tenant gets a deletionTimestamp (and, as the API
        server does, a new generation); without, it is gone. Returns what the watch would send."""
        obj = self.tenants[(namespace, name)]
        if not obj["metadata"].get("finalizers"):
            del self.tenants[(namespace, name)]
            return None
        obj["metadata"]["deletionTimestamp"] = DELETED_AT
        obj["metadata"]["generation"] += 1
        obj["metadata"]["resourceVersion"] = self._next_version()
        return copy.deepcopy(obj)

    def set_phase(self, namespace: str, name: str, phase: str) -> dict[str, Any]:
        """``kubectl patch --subresource=status`` of the phase (the runbook's retry)."""
        obj = self.tenants[(namespace, name)]
        obj.setdefault("status", {})["phase"] = phase
        obj["metadata"]["resourceVersion"] = self._next_version()
        return copy.deepcopy(obj)

    def edit_spec(self, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
        """``kubectl edit`` of the spec: a new generation."""
        obj = self.tenants[(namespace, name)]
        _merge(obj["spec"], spec)
        obj["metadata"]["generation"] += 1
        obj["metadata"]["resourceVersion"] = self._next_version()
        return copy.deepcopy(obj)

    def add_namespace(
        self, name: str, labels: Mapping[str, str], terminating: bool = False, created: datetime = NAMESPACES_MADE
    ) -> None:
        self.namespaces[name] = {"labels": dict(labels), "terminating": terminating, "created": created}

    def finish_namespace_deletion(self, name: str) -> None:
        """The namespace controller is done: a terminating namespace disappears, and what was in it
        (Roles, RoleBindings, Secrets, helm's release records among them)."""
        assert self.namespaces[name]["terminating"], f"namespace {name} is not being deleted"
        del self.namespaces[name]
        releases = self.helm.releases if self.helm is not None else {}
        for held in (self.roles, self.role_bindings, self.secrets, releases):
            for key in [k for k in held if k[0] == name]:
                del held[key]

    def add_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        labels: Mapping[str, str],
        type_: str = "Opaque",
    ) -> None:
        self.secrets[(namespace, name)] = {
            "labels": dict(labels),
            "data": dict(data),
            "type": type_,
            "resourceVersion": self._next_version(),
        }

    def boot_vcluster(self, tenant_name: str, config: bytes, generation: int = 1) -> None:
        """The vCluster came up: its StatefulSet rolled out (at ``generation``) with its pod ready,
        and vcluster wrote its kubeconfig Secret."""
        namespace, release = f"vcluster-{tenant_name}", f"vc-{tenant_name}"
        self.rollouts[(namespace, release)] = Rollout(generation, generation, 1, 1, 1)
        self.policies |= {(namespace, o) for o in policy_objects(release)}  # the chart rendered them
        self.add_secret(namespace, f"vc-{release}", {VCLUSTER_CONFIG_KEY: config}, {})

    def event(self, reason: str) -> dict[str, Any]:
        """The one Event with ``reason`` (fails the test if there are none or several)."""
        found = [e for e in self.events if e["reason"] == reason]
        assert len(found) == 1, f"expected one {reason} Event, found {found}"
        return found[0]

    def event_reasons(self) -> list[str]:
        return [e["reason"] for e in self.events]

    # Tenants ------------------------------------------------------------------------------------

    def _write(self, what: str, target: str) -> None:
        _tally(self.writes, what)
        self.journal.append((what, target))

    def _stored_for_write(self, tenant: Tenant, resource_version: str | None) -> dict[str, Any]:
        obj = self.tenants.get((tenant.namespace, tenant.name))
        if obj is None or obj["metadata"]["uid"] != tenant.uid:
            raise TenantGone(f"tenant {tenant.key} was deleted meanwhile")
        if resource_version and obj["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(f"tenant {tenant.key}: conflict (resourceVersion {resource_version} is stale)")
        return obj

    def get_tenant(self, namespace: str, name: str) -> Tenant | None:
        _tally(self.calls, "get_tenant")
        obj = self.tenants.get((namespace, name))
        return None if obj is None else Tenant.from_object(copy.deepcopy(obj))

    def tenant_pages(self, namespace: str) -> Iterator[list[Tenant]]:
        """One LIST, ``tenant_page`` Tenants a page in the API server's order (by name), of one
        snapshot (the first page's, as a continue token keeps it), each page made when the caller
        turns to it."""
        _tally(self.calls, "tenant_pages")
        snapshot = [copy.deepcopy(obj) for (ns, _name), obj in sorted(self.tenants.items()) if ns == namespace]
        for start in range(0, len(snapshot), self.tenant_page):
            self.tenant_pages_read += 1
            yield [Tenant.from_object(obj) for obj in snapshot[start : start + self.tenant_page]]

    def list_tenants(self, namespace: str, field_selector: str) -> list[Tenant]:
        _tally(self.calls, "list_tenants")
        if field_selector == "":  # no selector: every Tenant of the namespace (resync's one list call)
            return [
                Tenant.from_object(copy.deepcopy(obj))
                for (ns, _name), obj in sorted(self.tenants.items())
                if ns == namespace
            ]
        key, _, value = field_selector.partition("=")
        if key not in _SELECTABLE or not value:
            raise ValueError(f"field selector {field_selector!r} is not a selectable field of Tenants")
        return [
            Tenant.from_object(copy.deepcopy(obj))
            for (ns, _name), obj in sorted(self.tenants.items())
            if ns == namespace and obj["spec"].get(_SELECTABLE[key]) == value
        ]

    def patch_tenant_status(self, tenant: Tenant, update: StatusUpdate) -> Tenant:
        _tally(self.calls, "patch_tenant_status")
        body = update.patch_for(tenant)
        obj = self._stored_for_write(tenant, body.get("metadata", {}).get("resourceVersion"))
        _merge(obj.setdefault("status", {}), body["status"])
        obj["metadata"]["resourceVersion"] = self._next_version()
        self._write("status", f"{tenant.key}:{body['status'].get('phase', '')}")
        self.echoes.append(copy.deepcopy(obj))
        return Tenant.from_object(copy.deepcopy(obj))

    def set_finalizer(self, tenant: Tenant, present: bool) -> Tenant:
        _tally(self.calls, "set_finalizer")
        obj = self._stored_for_write(tenant, tenant.resource_version)
        others = [f for f in tenant.finalizers if f != FINALIZER]
        obj["metadata"]["finalizers"] = [*others, FINALIZER] if present else others
        obj["metadata"]["resourceVersion"] = self._next_version()
        self._write("finalizer+" if present else "finalizer-", tenant.key)
        self.echoes.append(copy.deepcopy(obj))
        result = Tenant.from_object(copy.deepcopy(obj))
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"]["finalizers"]:
            del self.tenants[(tenant.namespace, tenant.name)]  # the API server finishes the deletion
        return result

    # Events -------------------------------------------------------------------------------------

    def record_event(self, tenant: Tenant, event: TenantEvent) -> None:
        _tally(self.calls, "record_event")
        self._write("event", event.reason)
        for known in self.events:
            if (known["uid"], known["reason"], known["message"]) == (tenant.uid, event.reason, event.message):
                known["count"] += 1
                return
        self.events.append(
            {
                "tenant": tenant.key,
                "uid": tenant.uid,
                "type": event.type,
                "reason": event.reason,
                "message": event.message,
                "count": 1,
            }
        )

    # Namespaces ---------------------------------------------------------------------------------

    def get_namespace(self, name: str) -> NamespaceInfo | None:
        _tally(self.calls, "get_namespace")
        found = self.namespaces.get(name)
        if found is None:
            return None
        return NamespaceInfo(dict(found["labels"]), found["terminating"], found.get("remaining", ""))

    def create_namespace(self, name: str, labels: Mapping[str, str]) -> bool:
        _tally(self.calls, "create_namespace")
        if name in self.namespaces:
            return False
        self._write("namespace create", name)
        self.namespaces[name] = {"labels": dict(labels), "terminating": False, "created": datetime.now(UTC)}
        return True

    def label_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        _tally(self.calls, "label_namespace")
        if name not in self.namespaces:
            raise LookupError(f"namespace {name} not found")
        self._write("namespace label", name)
        self.namespaces[name]["labels"].update(labels)

    def list_owned_namespaces(self) -> list[OwnedNamespace]:
        _tally(self.calls, "list_owned_namespaces")
        return [
            OwnedNamespace(name, dict(ns["labels"]), ns.get("created", NAMESPACES_MADE), ns["terminating"])
            for name, ns in sorted(self.namespaces.items())
            if LABEL_OWNER_UID in ns["labels"]
        ]

    def delete_namespace(self, name: str) -> None:
        _tally(self.calls, "delete_namespace")
        if name in self.namespaces:
            self._write("namespace delete", name)
            self.namespaces[name]["terminating"] = True

    # StatefulSets -------------------------------------------------------------------------------

    def get_rollout(self, namespace: str, name: str) -> Rollout | None:
        _tally(self.calls, "get_rollout")
        return self.rollouts.get((namespace, name))

    def list_rollouts(self, label_selector: str) -> dict[tuple[str, str], Rollout]:
        """Every StatefulSet but the ``unlabelled`` (install's values label each one it makes)."""
        _tally(self.calls, "list_rollouts")
        return {key: rollout for key, rollout in self.rollouts.items() if key not in self.unlabelled}

    def list_seen(self, label_selector: str) -> tuple[dict[tuple[str, str], Seen], str]:
        _tally(self.calls, "list_seen")
        return dict(self.seen), self.list_version

    def watch_seen(self, label_selector: str, resource_version: str, timeout_seconds: int) -> Iterator[Change]:
        _tally(self.calls, "watch_seen")
        self.watched_from.append(resource_version)
        if not self.watches:
            self.out_of_watches()
            return
        for item in self.watches.pop(0):
            if isinstance(item, TemporaryError):
                raise item
            yield item

    def restart_rollout(self, namespace: str, name: str, at: str) -> int | None:
        """A new generation of the pod template; its controller has not rolled it out yet."""
        _tally(self.calls, "restart_rollout")
        current = self.rollouts.get((namespace, name))
        if current is None:
            return None
        self._write("statefulset restart", f"{namespace}/{name}")
        generation = current.generation + 1
        self.rollouts[(namespace, name)] = dataclasses.replace(current, generation=generation)
        return generation

    def volumes_claimed_in(self, namespace: str) -> list[Volume]:
        _tally(self.calls, "volumes_claimed_in")
        return [v for v in self.volumes.values() if v.claim.startswith(f"{namespace}/")]

    def delete_volume(self, name: str, resource_version: str) -> None:
        _tally(self.calls, "delete_volume")
        found = self.volumes.get(name)
        if found is not None and found.resource_version == resource_version:
            self._write("volume delete", name)
            del self.volumes[name]

    def service_cidrs(self) -> list[tuple[str, list[str]]] | None:
        """The host's ServiceCIDRs (shared.model.service_range): the test bed's range, as its API server has it."""
        _tally(self.calls, "service_cidrs")
        return self.service_ranges

    def iter_policy_objects(self, namespace: str | None = None) -> Iterator[tuple[str, PolicyObject]]:
        _tally(self.calls, "iter_policy_objects")
        return iter([(ns, o) for ns, o in sorted(self.policies, key=str) if namespace is None or ns == namespace])

    # Roles and RoleBindings (shared.steps.access) -----------------------------------------------------

    def _into_namespace(self, what: str, namespace: str) -> None:
        """The API server's answer to a create in a namespace that is gone or being deleted."""
        if namespace not in self.namespaces:
            raise TemporaryError(f"{what}: its namespace does not exist")
        if self.namespaces[namespace]["terminating"]:
            raise NamespaceTerminating(f"{what}: the namespace is being deleted")

    def get_role(self, namespace: str, name: str) -> Role | None:
        _tally(self.calls, "get_role")
        return self.roles.get((namespace, name))

    def get_role_binding(self, namespace: str, name: str) -> RoleBinding | None:
        _tally(self.calls, "get_role_binding")
        return self.role_bindings.get((namespace, name))

    def allowed(self, namespace: str, verb: str, group: str, resource: str) -> bool:
        """The API server's RBAC answer; here install's own binding is in force as soon as it is made."""
        _tally(self.calls, "allowed")
        return (namespace, "kubeopera-tenants:tenant-install") in self.role_bindings

    def create_role(self, role: Role) -> bool:
        _tally(self.calls, "create_role")
        self._into_namespace(f"create role {role.name}", role.namespace)
        if (role.namespace, role.name) in self.roles:
            return False
        self._write("role create", f"{role.namespace}/{role.name}")
        self.roles[(role.namespace, role.name)] = dataclasses.replace(role, resource_version=self._next_version())
        return True

    def create_role_binding(self, binding: RoleBinding) -> bool:
        _tally(self.calls, "create_role_binding")
        self._into_namespace(f"create rolebinding {binding.name}", binding.namespace)
        if (binding.namespace, binding.name) in self.role_bindings:
            return False
        self._write("rolebinding create", f"{binding.namespace}/{binding.name}")
        stored = dataclasses.replace(binding, resource_version=self._next_version())
        self.role_bindings[(binding.namespace, binding.name)] = stored
        return True

    def patch_role(self, role: Role, resource_version: str) -> None:
        _tally(self.calls, "patch_role")
        current = self.roles[(role.namespace, role.name)]
        if current.resource_version != resource_version:
            raise Conflict(f"patch role {role.name}: conflict")
        self._write("role patch", f"{role.namespace}/{role.name}")
        labels = dict(current.labels) | dict(role.labels)
        self.roles[(role.namespace, role.name)] = dataclasses.replace(
            current, rules=role.rules, labels=labels, resource_version=self._next_version()
        )

    def patch_role_binding(self, binding: RoleBinding, resource_version: str) -> None:
        _tally(self.calls, "patch_role_binding")
        current = self.role_bindings[(binding.namespace, binding.name)]
        if current.resource_version != resource_version:
            raise Conflict(f"patch rolebinding {binding.name}: conflict")
        self._write("rolebinding patch", f"{binding.namespace}/{binding.name}")
        labels = dict(current.labels) | dict(binding.labels)
        self.role_bindings[(binding.namespace, binding.name)] = dataclasses.replace(
            current, subjects=binding.subjects, labels=labels, resource_version=self._next_version()
        )

    def delete_role_binding(self, namespace: str, name: str, resource_version: str) -> None:
        _tally(self.calls, "delete_role_binding")
        current = self.role_bindings.get((namespace, name))
        if current is None:
            return
        if current.resource_version != resource_version:
            raise Conflict(f"delete rolebinding {name}: conflict")
        self._write("rolebinding delete", f"{namespace}/{name}")
        del self.role_bindings[(namespace, name)]

    # Leases (the cross-process helm lock) ---------------------------------------------------------

    def acquire_lease(self, namespace: str, name: str, holder: str, seconds: int) -> str | None:
        _tally(self.calls, "acquire_lease")
        current = self.leases.get((namespace, name))
        if current is not None and current != holder:
            return None
        self.leases[(namespace, name)] = holder
        return holder  # stands for the resourceVersion of the hold

    def release_lease(self, namespace: str, name: str, resource_version: str) -> None:
        _tally(self.calls, "release_lease")
        if self.leases.get((namespace, name)) == resource_version:
            del self.leases[(namespace, name)]

    # Claims (Leases cloudspace-<id>) ------------------------------------------------------------

    def create_claim(self, tenant: Tenant, name: str, labels: Mapping[str, str]) -> bool:
        _tally(self.calls, "create_claim")
        if (tenant.namespace, name) in self.claims:
            return False
        self._write("claim create", f"{tenant.namespace}/{name}")
        self.claims[(tenant.namespace, name)] = Marker(dict(labels), self._next_version())
        return True

    def get_claim(self, namespace: str, name: str) -> Marker | None:
        _tally(self.calls, "get_claim")
        return self.claims.get((namespace, name))

    def delete_claim(self, namespace: str, name: str, resource_version: str) -> None:
        _tally(self.calls, "delete_claim")
        current = self.claims.get((namespace, name))
        if current is None or current.resource_version != resource_version:
            return
        self._write("claim delete", f"{namespace}/{name}")
        del self.claims[(namespace, name)]

    # Secrets ------------------------------------------------------------------------------------

    def review_token(self, token: str, audience: str) -> Review:
        _tally(self.calls, "review_token")
        return self.token_reviews.get(token, Review(authenticated=False))

    def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        _tally(self.calls, "read_secret_key")
        found = self.secrets.get((namespace, name))
        return (found["data"].get(key) or None) if found is not None else None

    def list_secret_records(self, namespace: str, label_selector: str) -> list[SecretMeta]:
        """helm's release record (shared.adapters.release) of the FakeHelm on this FakeKube, one record per
        release, its current revision, named, typed and labelled as helm's Secret driver does;
        and every Secret added in ``namespace`` whose labels match (a forged record, say)."""
        _tally(self.calls, "list_secret_records")
        return [found.meta for found in self._records(namespace, label_selector)]

    def list_release_records(self, namespace: str, label_selector: str) -> list[SecretRecord]:
        """``list_secret_records`` with each record's ``release`` key, encoded as helm encodes it."""
        _tally(self.calls, "list_release_records")
        return self._records(namespace, label_selector)

    def _records(self, namespace: str, label_selector: str) -> list[SecretRecord]:
        wanted = dict(part.split("=", 1) for part in label_selector.split(","))
        found = []
        for (ns, release), current in (self.helm.releases if self.helm else {}).items():
            revision = current["revision"]
            labels = {"owner": "helm", "name": release, "status": current["status"], "version": str(revision)}
            if ns == namespace and wanted.items() <= labels.items():
                body = helm_release_body(release, ns, revision, current["status"], current["values"])
                found.append(SecretRecord(SecretMeta(record_name(release, revision), RECORD_TYPE, labels), body))
        for (ns, name), secret in self.secrets.items():
            if ns == namespace and wanted.items() <= secret["labels"].items():
                meta = SecretMeta(name, secret["type"], dict(secret["labels"]))
                found.append(SecretRecord(meta, secret["data"].get("release")))
        return found

    def iter_secrets(
        self, namespace: str, label_selector: str, keys: Collection[str]
    ) -> Iterator[tuple[str, StoredSecret]]:
        """(name, Secret) of each Secret in ``namespace`` whose labels match ``key=value,...``,
        with ``keys`` of its data."""
        _tally(self.calls, "iter_secrets")
        wanted = dict(part.split("=", 1) for part in label_selector.split(","))
        for (ns, name), found in list(self.secrets.items()):
            if ns == namespace and wanted.items() <= found["labels"].items():
                data = {k: v for k, v in found["data"].items() if k in keys}
                yield name, StoredSecret(dict(found["labels"]), data, found["resourceVersion"])

    def get_secret(self, namespace: str, name: str) -> StoredSecret | None:
        _tally(self.calls, "get_secret")
        found = self.secrets.get((namespace, name))
        if found is None:
            return None
        return StoredSecret(dict(found["labels"]), dict(found["data"]), found["resourceVersion"])

    def write_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        labels: Mapping[str, str],
        resource_version: str | None,
    ) -> None:
        _tally(self.calls, "write_secret")
        current = self.secrets.get((namespace, name))
        if resource_version is None and current is not None:
            raise Conflict(f"create secret {namespace}/{name}: conflict (AlreadyExists)")
        if resource_version is not None and (current is None or current["resourceVersion"] != resource_version):
            raise Conflict(f"replace secret {namespace}/{name}: conflict (resourceVersion {resource_version} is stale)")
        self._write("secret write", f"{namespace}/{name}")
        self.secrets[(namespace, name)] = {
            "labels": dict(labels),
            "data": dict(data),
            "type": "Opaque",
            "resourceVersion": self._next_version(),
        }

    def delete_secret(self, namespace: str, name: str, resource_version: str) -> None:
        _tally(self.calls, "delete_secret")
        current = self.secrets.get((namespace, name))
        if current is None:
            return
        if current["resourceVersion"] != resource_version:
            raise Conflict(f"delete secret {namespace}/{name}: conflict (precondition failed)")
        self._write("secret delete", f"{namespace}/{name}")
        del self.secrets[(namespace, name)]


def helm_release_body(
    name: str,
    namespace: str,
    revision: int,
    status: str,
    values: Mapping[str, Any] | None,
    chart_version: str = "0.21.2",
    *,
    last_deployed: str = "2026-12-04T02:30:00.123456789Z",
    gzipped: bool = True,
) -> bytes:
    """A release record's ``release`` key as helm's Secret driver writes it (pkg/storage/driver/util.go,
    encodeRelease: base64 of the gzip of the release's JSON), the API's own base64 already undone."""
    release = {
        "name": name,
        "namespace": namespace,
        "version": revision,
        "info": {"first_deployed": last_deployed, "last_deployed": last_deployed, "status": status},
        "chart": {"metadata": {"name": "vcluster", "version": chart_version}, "templates": []},
        "config": None if values is None else dict(values),
        "manifest": "---\n",
    }
    raw = json.dumps(release).encode()
    return base64.b64encode(gzip.compress(raw) if gzipped else raw)


class FakeHelm:
    """Releases as ``{"values", "revision", "status"}``. Like the adapter, a guard sees the current
    values (None: no release) before anything changes, a deployed release with the same values is
    not touched again, and a pending one is busy. With a ``FakeKube`` it refuses to install into a
    namespace that does not exist (install uses ``create_namespace=False``) and journals there."""

    def __init__(self, kube: FakeKube | None = None) -> None:
        self.kube = kube
        if kube is not None:
            kube.helm = self
        self.releases: dict[tuple[str, str], dict[str, Any]] = {}
        self.operations: list[tuple[str, str]] = []  # ("install" | "upgrade" | "uninstall", "ns/name")
        self.calls: Counter[str] = Counter()
        self.schema: Mapping[str, Any] | None = None

    def add_release(
        self, name: str, namespace: str, values: Mapping[str, Any], status: str = DEPLOYED, revision: int = 1
    ) -> None:
        self.releases[(namespace, name)] = {
            "values": copy.deepcopy(dict(values)),
            "revision": revision,
            "status": status,
        }

    def values_of(self, name: str, namespace: str) -> dict[str, Any]:
        return copy.deepcopy(self.releases[(namespace, name)]["values"])

    def chart(self) -> Any:
        """The pinned chart (install's readiness asks for it); always at hand here."""
        _tally(self.calls, "chart")
        return {"name": "vcluster", "version": CHART_VERSION}

    def values_schema(self) -> Mapping[str, Any] | None:
        """The chart's values.schema.json: ``schema`` (none unless a test gives one)."""
        _tally(self.calls, "values_schema")
        return self.schema

    def _state(self, name: str, namespace: str) -> ReleaseState:
        found = self.releases[(namespace, name)]
        return ReleaseState(name, namespace, found["revision"], found["status"], CHART_VERSION)

    def _operate(self, op: str, name: str, namespace: str) -> None:
        self.operations.append((op, f"{namespace}/{name}"))
        if self.kube is not None:
            self.kube.journal.append((f"helm {op}", f"{namespace}/{name}"))
            # helm makes (or removes) the chart's StatefulSet; nothing has rolled it out yet.
            # So are its namespace policies (shared.model.isolation), and an upgrade makes any that is gone.
            made = {(namespace, o) for o in policy_objects(name)}
            if op == "uninstall":
                self.kube.rollouts.pop((namespace, name), None)
                self.kube.policies -= made
            else:
                self.kube.policies |= made
                if (namespace, name) not in self.kube.rollouts:
                    self.kube.rollouts[(namespace, name)] = Rollout(1, 0, 1, 0, 0)

    def release(self, name: str, namespace: str) -> ReleaseState | None:
        _tally(self.calls, "release")
        return self._state(name, namespace) if (namespace, name) in self.releases else None

    def install_or_upgrade(
        self,
        name: str,
        namespace: str,
        values: Mapping[str, Any],
        guard: Guard = None,
        *,
        reapply: Callable[[], bool] | None = None,
        keep: Keep = None,
    ) -> ReleaseState:
        _tally(self.calls, "install_or_upgrade")
        self._read_history(name, namespace)
        current = self.releases.get((namespace, name))
        if guard is not None:
            guard(None if current is None else copy.deepcopy(current["values"]))
        if keep is not None:
            values = keep(values, None if current is None else copy.deepcopy(current["values"]))
        if current is not None and current["status"] in PENDING_STATES:
            busy = f"release {namespace}/{name} is {current['status']}: another helm operation is in progress"
            raise WorkInHand(busy, retry_after=5)
        if (
            current is not None
            and current["status"] == DEPLOYED
            and current["values"] == dict(values)
            and not (reapply and reapply())
        ):
            return self._state(name, namespace)
        if self.kube is not None and namespace not in self.kube.namespaces:
            raise TemporaryError(f'helm upgrade --install {namespace}/{name}: namespaces "{namespace}" not found')
        revision = 1 if current is None else current["revision"] + 1
        self._operate("install" if current is None else "upgrade", name, namespace)
        self.releases[(namespace, name)] = {
            "values": copy.deepcopy(dict(values)),
            "revision": revision,
            "status": DEPLOYED,
        }
        return self._state(name, namespace)

    def _read_history(self, name: str, namespace: str) -> None:
        """As the adapter reads helm's record before anything else (``Helm._current``): one LIST of
        the release's Secrets on the FakeKube, which raises ``ReleaseTampered`` on a forged one."""
        if self.kube is not None:
            history(name, namespace, (r.meta for r in self.kube.list_release_records(namespace, record_selector(name))))

    def uninstall(self, name: str, namespace: str, guard: Guard = None) -> bool:
        _tally(self.calls, "uninstall")
        self._read_history(name, namespace)
        current = self.releases.get((namespace, name))
        if current is None:
            return False
        if guard is not None:
            guard(copy.deepcopy(current["values"]))
        self._operate("uninstall", name, namespace)
        del self.releases[(namespace, name)]
        return True


class FakeSink:
    """The broker as resync's ``Sink`` sees it: records each event (and its traceparent) it is sent;
    with ``failure`` it raises that instead, as ``Sink`` does when the broker is down. With a
    ``FakeKube`` each send is journaled there too, so a test sees it in order with the writes."""

    def __init__(self, kube: FakeKube | None = None, failure: TemporaryError | None = None) -> None:
        self.kube = kube
        self.failure = failure
        self.sent: list[BaseCloudEvent] = []
        self.traceparents: list[str] = []

    def send(self, event: BaseCloudEvent) -> None:
        if self.failure is not None:
            raise self.failure
        self.sent.append(event)
        self.traceparents.append(tracing.current_traceparent())  # what the real Sink stamps on the event
        if self.kube is not None:
            self.kube.journal.append(("send", event.get_type()))


class FakeVClusterApi:
    """A vCluster's API as check-ready asks it: records each kubeconfig and answers ``missing``
    (None: the vCluster works through it)."""

    def __init__(self, missing: str | None = None) -> None:
        self.missing_now = missing
        self.asked: list[bytes] = []

    def missing(self, kubeconfig: bytes) -> str | None:
        self.asked.append(kubeconfig)
        return self.missing_now


class FakeKubeoperaApi:
    """kubeopera-api's client: records each report and answers ``result``."""

    def __init__(self, result: CallbackResult | None = None) -> None:
        self.result = result or CallbackResult(True, "answered 200")
        self.reports: list[CloudSpaceUpdate] = []

    def report(self, update: CloudSpaceUpdate) -> CallbackResult:
        self.reports.append(update)
        return self.result


def fake_runtime(
    kube: FakeKube,
    helm: FakeHelm,
    api: FakeKubeoperaApi,
    settings: Settings | None = None,
    sink: FakeSink | None = None,
) -> Runtime:
    """A ``Runtime`` of the stand-ins above (what a test gives a function's ``create_app``)."""
    return Runtime(
        settings=settings or Settings(),
        kube=kube,
        helm=helm,
        kubeopera_api=api,
        sink=sink or FakeSink(kube),
        vcluster_api=FakeVClusterApi(),
    )
