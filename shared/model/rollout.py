"""Fleet upgrades in waves: what a Tenant runs against what it should run, and who may upgrade now.

When the chart version, a plan or the base values change, every Ready Tenant they affect is
behind; install upgrades them at most ``ROLLOUT_MAX_PARALLEL`` at a time across the fleet
(``shared.steps.rollout``). The decisions here are pure:

- ``Target``: a chart version and the digest of the values install passes to helm
  (``digest``). install writes the one it applied on the Tenant (``status.chartVersion``,
  ``status.valuesDigest``) with each install or upgrade; ``running`` reads it back.
- ``behind``: a Ready Tenant, settled at its generation, that runs another target than the one
  install computes now: a *fleet change*, which waits for a slot. A Tenant's own change (a new
  generation: a quota) is install's work at once, never held back (``lifecycle.wants_install``).
  A Tenant with no target recorded (provisioned before this field existed) is behind once: its
  upgrade changes nothing in helm (same values, same chart) and records the target.
- ``upgrade_begun``: install wrote Provisioning for a fleet upgrade and did not finish it (helm's
  answer was temporary, say): its event's re-delivery goes on.
- ``Slot``: a rollout slot, Lease ``rollout-slot-<i>`` in the Tenants' namespace, created by the
  install that takes it for one Tenant and one target (its labels). A slot is held from the
  upgrade until its Tenant is Ready again at that target (``slot_free``: then any install may take
  it over, so nobody has to give it back), or at a newer generation (its own change superseded
  the upgrade), or the Tenant is gone.
- A slot whose Tenant is Failed halts the rollout (``halted_by``): no slot is taken while it does,
  and the halt is recorded (Lease ``rollout-halted``, naming the Tenant) so that it lasts until
  ``kubeopera-tenants rollout resume`` removes it, even once the Tenant was fixed and retried.
- ``next_up``: the waiting Tenant notify-api asks install for when it makes an upgraded Tenant
  Ready (its slot is free now), so that the next wave does not wait for resync's tick.
- ``state``: what ``kubeopera-tenants rollout status`` and the metric say of each Tenant: done,
  waiting, in progress, halted, or outside the rollout (not Ready, and holding no slot).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared.model.tenant import Phase, Tenant

SLOT_PREFIX: Final = "rollout-slot-"
HALT_NAME: Final = "rollout-halted"
# The Leases' labels: what the slot is for (and the halt record names), read back by ``Slot.of``.
ROLE_LABEL: Final = "kubeopera.io/rollout"
TENANT_LABEL: Final = "kubeopera.io/rollout-tenant"
UID_LABEL: Final = "kubeopera.io/rollout-tenant-uid"
GENERATION_LABEL: Final = "kubeopera.io/rollout-generation"
CHART_LABEL: Final = "kubeopera.io/rollout-chart-version"
DIGEST_LABEL: Final = "kubeopera.io/rollout-values-digest"
# Status ``rollout``: "Waiting" as resync marks a Tenant that waits for a slot; "Upgrading" as
# install writes it when it upgrades one in a slot (notify-api's Ready clears it); "" otherwise.
WAITING_MARK: Final = "Waiting"
UPGRADING_MARK: Final = "Upgrading"
DIGEST_LENGTH: Final = 16  # hex characters of sha256: a label value, and short in ``kubectl get -o wide``


def digest(values: Mapping[str, Any]) -> str:
    """The digest of a release's values: sha256 of their canonical JSON, its first 16 hex digits."""
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:DIGEST_LENGTH]


@dataclass(frozen=True)
class Target:
    """What a release runs: the chart's version and the digest of its values."""

    chart_version: str
    values_digest: str

    @classmethod
    def of(cls, chart_version: str, values: Mapping[str, Any]) -> Target:
        return cls(chart_version, digest(values))

    def status_fields(self) -> dict[str, str]:
        return {"chartVersion": self.chart_version, "valuesDigest": self.values_digest}


def running(tenant: Tenant) -> Target | None:
    """The target install last applied to this Tenant, None when none is recorded."""
    status = tenant.status
    if not status.chart_version or not status.values_digest:
        return None
    return Target(status.chart_version, status.values_digest)


def in_fleet(tenant: Tenant) -> bool:
    """Ready at its generation, ours and alive: a Tenant a fleet change may upgrade."""
    return tenant.ready_at_generation() and tenant.has_finalizer and not tenant.deleting


def behind(tenant: Tenant, wanted: Target) -> bool:
    """A fleet change: Ready at its generation, running another target than ``wanted``."""
    return in_fleet(tenant) and running(tenant) != wanted


def upgrade_begun(tenant: Tenant, wanted: Target) -> bool:
    """A fleet upgrade install began (phase Provisioning, ``Upgrading``) and did not finish (it
    records the target last): a re-delivery of its event goes on with it, in the slot it holds."""
    status = tenant.status
    return (
        status.phase == Phase.PROVISIONING
        and status.rollout == UPGRADING_MARK
        and status.observed_generation == tenant.generation
        and tenant.has_finalizer
        and not tenant.deleting
        and running(tenant) != wanted
    )


@dataclass(frozen=True)
class Slot:
    """A held rollout slot: which Tenant it is for, and the target it upgrades it to."""

    name: str
    tenant: str  # the Tenant's name (in the Tenants' namespace)
    uid: str
    generation: int
    target: Target
    resource_version: str

    @classmethod
    def of(cls, name: str, labels: Mapping[str, str], resource_version: str) -> Slot:
        try:
            generation = int(labels.get(GENERATION_LABEL, "0"))
        except ValueError:
            generation = 0
        return cls(
            name=name,
            tenant=labels.get(TENANT_LABEL, ""),
            uid=labels.get(UID_LABEL, ""),
            generation=generation,
            target=Target(labels.get(CHART_LABEL, ""), labels.get(DIGEST_LABEL, "")),
            resource_version=resource_version,
        )

    def holds(self, tenant: Tenant) -> bool:
        return self.uid == tenant.uid


def slot_name(index: int) -> str:
    return f"{SLOT_PREFIX}{index}"


def slot_labels(tenant: Tenant, wanted: Target) -> dict[str, str]:
    """The labels of the slot a Tenant takes for ``wanted`` (``Slot.of`` reads them)."""
    return {
        ROLE_LABEL: "slot",
        TENANT_LABEL: tenant.name,
        UID_LABEL: tenant.uid,
        GENERATION_LABEL: str(tenant.generation),
        CHART_LABEL: wanted.chart_version,
        DIGEST_LABEL: wanted.values_digest,
    }


def halt_labels(tenant: Tenant) -> dict[str, str]:
    """The labels of the halt record: the Tenant where the rollout stopped."""
    return {ROLE_LABEL: "halted", TENANT_LABEL: tenant.name, UID_LABEL: tenant.uid}


def slot_free(slot: Slot, holder: Tenant | None) -> bool:
    """May another Tenant take this slot over: its Tenant is gone (or replaced), or Ready again,
    at the slot's target or at a newer generation than it was taken at."""
    if holder is None or holder.uid != slot.uid:
        return True
    if holder.deleting or holder.generation > slot.generation:
        return True  # gone, or its own change superseded the upgrade it took the slot for
    return holder.ready_at_generation() and running(holder) == slot.target


def slot_failed(slot: Slot, holder: Tenant | None) -> bool:
    """The slot's Tenant is Failed at the generation it took the slot at: its upgrade did not go
    through, and the rollout halts there. Failed at a newer generation is its own change failing
    (a slot is taken over, not handed back, so an upgraded Tenant keeps its Lease for a while):
    that says nothing of the fleet upgrade, and its slot is free (``slot_free``)."""
    return (
        holder is not None
        and holder.uid == slot.uid
        and holder.generation == slot.generation
        and holder.status.phase == Phase.FAILED
    )


class Admission(enum.Enum):
    """What install may do with a fleet change now."""

    GO = "go"  # it holds a slot (taken now or before)
    TAKE = "take"  # a slot is free: take it (``Decision.slot``: the one to take over, if held)
    HALTED = "halted"  # the rollout is halted: nothing is upgraded until it is resumed
    WAIT = "wait"  # every slot is held: a later pass sends it again


@dataclass(frozen=True)
class Decision:
    admission: Admission
    slot: str = ""  # the slot's name (held, to take, or where it halted)
    stale: Slot | None = None  # the free slot to delete before taking it (None: no Lease there)
    why: str = ""


def admit(
    tenant: Tenant,
    slots: Sequence[tuple[str, Slot | None, Tenant | None]],
    halted: Slot | None,
) -> Decision:
    """Whether install may upgrade ``tenant`` for a fleet change now, from the slots as read
    (each: its name, the Lease there or None, its Tenant as read or None) and the halt record.

    A Tenant that holds its slot goes on, halt or no halt: its upgrade began before the halt
    (helm may already have run it), and a halt stops upgrades from starting, not the recording
    of one begun. Refused there, a delivery that retries after a conflict on its status write
    would leave the Tenant Ready on the new chart with a status that names the old one."""
    for name, slot, holder in slots:
        if slot is not None and slot.holds(tenant) and not slot_free(slot, holder):
            return Decision(Admission.GO, name, why=f"holds {name}")
    if halted is not None:
        return Decision(Admission.HALTED, HALT_NAME, why=f"the rollout is halted at Tenant {halted.tenant}")
    for name, slot, holder in slots:
        if slot is not None and slot_failed(slot, holder):
            return Decision(Admission.HALTED, name, slot, why=f"Tenant {slot.tenant} failed its upgrade ({name})")
    for name, slot, holder in slots:
        if slot is None:
            return Decision(Admission.TAKE, name, why=f"{name} is free")
        if slot_free(slot, holder):
            return Decision(Admission.TAKE, name, slot, why=f"{name} is free")
    return Decision(Admission.WAIT, why=f"all {len(slots)} rollout slots are held")


def halted_by(slots: Sequence[tuple[str, Slot | None, Tenant | None]]) -> Slot | None:
    """The slot whose Tenant failed its upgrade, if any (the first, by slot)."""
    return next((slot for _, slot, holder in slots if slot is not None and slot_failed(slot, holder)), None)


class State(enum.Enum):
    """Where a Tenant is in the rollout (``kubeopera-tenants rollout status``, the metric)."""

    DONE = "done"
    WAITING = "waiting"
    IN_PROGRESS = "in progress"
    HALTED = "halted"
    OUTSIDE = "-"  # not Ready and holding no slot: its own work (install, cleanup), or Failed


def state(tenant: Tenant, is_behind: bool, slot: Slot | None, halted: Slot | None) -> State:
    """One Tenant's state. ``is_behind``: ``behind`` as computed for it (with install's target);
    ``slot``: the held slot that is its, if any; ``halted``: the halt record, if any."""
    if halted is not None and halted.uid == tenant.uid:
        return State.HALTED
    if slot is not None:
        if slot_failed(slot, tenant):
            return State.HALTED
        if not slot_free(slot, tenant):
            return State.IN_PROGRESS
    if is_behind:
        return State.WAITING
    return State.DONE if in_fleet(tenant) else State.OUTSIDE


def waiting_mark(tenant: Tenant, is_behind: bool) -> str | None:
    """The ``status.rollout`` resync should write, None when it is right as it is: "Waiting" on a
    Tenant behind, "" on one marked Waiting that no longer is. install's "Upgrading" is notify-api's
    to clear (its Ready asks for the next Tenant)."""
    if is_behind:
        return None if tenant.status.rollout == WAITING_MARK else WAITING_MARK
    return "" if tenant.status.rollout == WAITING_MARK else None


def next_up(done: Tenant, tenants: Sequence[Tenant]) -> Tenant | None:
    """The waiting Tenant (``status.rollout: Waiting``) to send to install now that ``done``, just
    made Ready after its upgrade, frees its slot: of the Tenants still upgrading and ``done``, by
    name, ``done``'s place picks the waiting one at the same place (so two slots freed at once ask
    for two Tenants, not one twice), the last waiting one past the end; None when none waits. Races
    only make two ask for one (install takes one slot for it; resync's tick fills the other)."""
    waiting = sorted((t for t in tenants if t.status.rollout == WAITING_MARK and in_fleet(t)), key=lambda t: t.name)
    if not waiting:
        return None
    upgrading = sorted({t.name for t in tenants if t.status.rollout == UPGRADING_MARK} | {done.name})
    return waiting[min(upgrading.index(done.name), len(waiting) - 1)]
