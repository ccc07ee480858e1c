"""The Tenant resource as immutable values, and the pure rules about its status.

``Tenant.from_object`` turns the API server's JSON into frozen dataclasses; functions decide on
those, never on raw dicts. ``StatusUpdate`` builds the merge patch for ``tenants/status``: it
carries ``metadata.resourceVersion`` so the API server applies it only to the version we read
(optimistic concurrency, design.md rule 3), and it keeps each condition's
``lastTransitionTime`` unless the condition's status really changes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from shared.errors import PermanentError
from shared.model.naming import ANNOTATION_DELETION_PROTECTION, TenantNames

GROUP = "kubeopera.io"
VERSION = "v1alpha1"
PLURAL = "tenants"
KIND = "Tenant"
API_VERSION = f"{GROUP}/{VERSION}"
# install adds it before its first write; cleanup removes it once everything the Tenant owned is
# gone, so a deleted Tenant stays visible (deletionTimestamp set) until its vCluster is removed.
FINALIZER = "kubeopera.io/cleanup"

# Condition types this project sets.
COND_READY = "Ready"
COND_RELEASE_INSTALLED = "ReleaseInstalled"
COND_KUBECONFIG_STORED = "KubeconfigStored"
COND_CALLBACK = "CallbackDelivered"
# Whether a Ready Tenant's vCluster works now (shared.model.health), kept after Ready by resync.
COND_AVAILABLE = "VClusterAvailable"


class Phase(enum.StrEnum):
    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    READY = "Ready"
    FAILED = "Failed"
    DELETING = "Deleting"


def deletion_protected(metadata: Mapping[str, Any]) -> bool:
    """Whether the API server refuses this Tenant's deletion (its ``metadata``), as
    ``deploy/base/policy/tenant-deletion-protection.yaml`` decides: it carries the annotation with
    any value but "false" (only "true" and "false" can be written; an older other value protects)."""
    annotations = metadata.get("annotations") or {}
    return ANNOTATION_DELETION_PROTECTION in annotations and annotations[ANNOTATION_DELETION_PROTECTION] != "false"


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


@dataclass(frozen=True)
class Quota:
    cpu: str
    memory: str


# The plan a Tenant runs when its spec names none (``spec.plan``; shared.model.plans).
DEFAULT_PLAN = "default"


@dataclass(frozen=True)
class TenantSpec:
    user_id: str
    tenant_name: str
    cloud_space_id: str
    quota: Quota
    plan: str = DEFAULT_PLAN  # spec.plan: the platform's values under its own (shared.model.plans)

    @property
    def names(self) -> TenantNames:
        return TenantNames.of(self.tenant_name, self.cloud_space_id)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""
    observed_generation: int = 0
    last_transition_time: str = ""

    def to_object(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": self.observed_generation,
            "lastTransitionTime": self.last_transition_time,
        }

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Condition:
        return cls(
            type=str(obj.get("type", "")),
            status=str(obj.get("status", "Unknown")),
            reason=str(obj.get("reason", "")),
            message=str(obj.get("message", "")),
            observed_generation=int(obj.get("observedGeneration", 0) or 0),
            last_transition_time=str(obj.get("lastTransitionTime", "")),
        )


@dataclass(frozen=True)
class TenantStatus:
    # Pending when the object has none: the CRD's default (deploy/crd/tenants.yaml), which the API
    # server applies to every Tenant it returns; only an object that did not come from it lacks one.
    phase: Phase = Phase.PENDING
    vcluster_name: str = ""
    namespace: str = ""
    kubeconfig_secret: str = ""
    last_synced_at: str = ""
    last_polled_at: str = ""  # check-ready's heartbeat while it polls (lifecycle.poll_heard)
    traceparent: str = ""  # install's trace context for this provisioning (tracing on)
    # What install last applied (shared.model.rollout): the chart version and its values' digest;
    # ``rollout`` is "Waiting" while a fleet change waits for a slot (resync marks it).
    chart_version: str = ""
    values_digest: str = ""
    rollout: str = ""
    observed_generation: int = 0
    message: str = ""
    conditions: tuple[Condition, ...] = ()

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def is_true(self, type_: str, generation: int) -> bool:
        cond = self.condition(type_)
        return cond is not None and cond.status == "True" and cond.observed_generation == generation


@dataclass(frozen=True)
class TenantRef:
    """Which Tenant, and which incarnation and generation of it, an event speaks about."""

    namespace: str
    name: str
    uid: str
    generation: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Tenant:
    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    spec: TenantSpec
    status: TenantStatus = field(default_factory=TenantStatus)
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    created: str = ""

    @property
    def ref(self) -> TenantRef:
        return TenantRef(self.namespace, self.name, self.uid, self.generation)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def has_finalizer(self) -> bool:
        return FINALIZER in self.finalizers

    def ready_at_generation(self) -> bool:
        """Ready, and Ready for the spec it has now (not an older one)."""
        return self.status.phase == Phase.READY and self.status.observed_generation == self.generation

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Tenant:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        quota = spec.get("quota") or {}
        try:
            tenant_spec = TenantSpec(
                user_id=str(spec["userID"]),
                tenant_name=str(spec["tenantName"]),
                cloud_space_id=str(spec["cloudSpaceID"]),
                quota=Quota(
                    cpu=_required(quota, "cpu", "quota.cpu"), memory=_required(quota, "memory", "quota.memory")
                ),
                plan=str(spec.get("plan") or DEFAULT_PLAN),
            )
        except KeyError as missing:
            raise PermanentError(f"Tenant {meta.get('name')!r} lacks spec.{missing.args[0]}") from None
        try:
            phase = Phase(status.get("phase") or Phase.PENDING)
        except ValueError:  # the CRD's enum refuses it; read as the default
            phase = Phase.PENDING
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation", 0) or 0),
            resource_version=str(meta.get("resourceVersion", "")),
            deleting=bool(meta.get("deletionTimestamp")),
            finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
            created=str(meta.get("creationTimestamp", "")),
            spec=tenant_spec,
            status=TenantStatus(
                phase=phase,
                vcluster_name=str(status.get("vclusterName", "")),
                namespace=str(status.get("namespace", "")),
                kubeconfig_secret=str(status.get("kubeconfigSecret", "")),
                last_synced_at=str(status.get("lastSyncedAt", "")),
                last_polled_at=str(status.get("lastPolledAt", "")),
                traceparent=str(status.get("traceparent", "")),
                chart_version=str(status.get("chartVersion", "") or ""),
                values_digest=str(status.get("valuesDigest", "") or ""),
                rollout=str(status.get("rollout", "") or ""),
                observed_generation=int(status.get("observedGeneration", 0) or 0),
                message=str(status.get("message", "")),
                conditions=tuple(Condition.from_object(c) for c in status.get("conditions") or ()),
            ),
        )


def _required(obj: Mapping[str, Any], key: str, path: str) -> str:
    if key not in obj:
        raise KeyError(path)
    return str(obj[key])


@dataclass(frozen=True)
class TenantEvent:
    """A Kubernetes Event about a Tenant: ``type`` Normal or Warning, a CamelCase ``reason``."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class StatusUpdate:
    """A change to a Tenant's status, as the fields to set and the conditions to put."""

    phase: Phase | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    conditions: Sequence[Condition] = ()

    def patch_for(self, tenant: Tenant, now: datetime | None = None) -> dict[str, Any]:
        """The merge patch for ``tenants/status``, guarded by the tenant's resourceVersion."""
        moment = rfc3339(now or utcnow())
        status: dict[str, Any] = dict(self.fields)
        if self.phase is not None:
            status["phase"] = self.phase.value
        if self.conditions:
            status["conditions"] = [
                c.to_object() for c in merge_conditions(tenant.status.conditions, self.conditions, moment)
            ]
        return {"metadata": {"resourceVersion": tenant.resource_version}, "status": status}

    def event_for(self, tenant: Tenant) -> TenantEvent | None:
        """The Kubernetes Event (type, reason, message) this update is worth: one per phase change.

        Failed is a Warning whose reason is the failure's (``OwnershipConflict``,
        ``ProvisionTimeout``, ``DeliveryFailed``, ...); Deleting is ``CleanupStarted``; the other
        phases are Normal Events named after the phase.
        """
        if self.phase is None or self.phase == tenant.status.phase:
            return None
        message = str(self.fields.get("message") or self.phase.value)
        if self.phase == Phase.FAILED:
            ready = next((c for c in self.conditions if c.type == COND_READY), None)
            return TenantEvent("Warning", ready.reason if ready else "Failed", message)
        if self.phase == Phase.DELETING:
            return TenantEvent("Normal", "CleanupStarted", message)
        return TenantEvent("Normal", self.phase.value, message)


def merge_conditions(current: Sequence[Condition], updates: Sequence[Condition], moment: str) -> list[Condition]:
    """Put ``updates`` into ``current`` by type, keeping transition times of unchanged statuses."""
    merged = {c.type: c for c in current}
    for update in updates:
        previous = merged.get(update.type)
        keep = previous is not None and previous.status == update.status and previous.last_transition_time
        transition = previous.last_transition_time if keep and previous else moment
        merged[update.type] = replace(update, last_transition_time=transition)
    return list(merged.values())
