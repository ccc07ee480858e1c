"""Fleet upgrades in waves, on the cluster: the rollout slots and the halt record as Leases.

The decisions are ``shared.model.rollout``'s; this module reads and writes what they decide on, in
the Tenants' namespace: Leases ``rollout-slot-0`` .. ``rollout-slot-<N-1>`` (``ROLLOUT_MAX_PARALLEL``)
and ``rollout-halted``, each created as a claim is (``Cluster.create_claim``: only one create of a
name succeeds, and the Lease is owned by its Tenant, so it goes when the Tenant is deleted).

- install asks ``admit`` before it upgrades a Tenant for a fleet change: the slot it holds, or a
  free one taken now (the one create that wins), or no (the rollout is halted, or every slot is
  held): then install answers that it has nothing to do, and the Tenant stays Ready as it is.
- whoever finds a slot whose Tenant is Failed records the halt (``record_halt``: Lease
  ``rollout-halted``, a Warning Event ``RolloutHalted`` on that Tenant): install in ``admit``,
  resync on each pass.
- ``kubeopera-tenants rollout resume`` (``resume``) deletes the halt record and the slots of
  Tenants still Failed (skipped: a retry upgrades them as their own work).

``target`` is what the Tenant should run, from the values install passes to helm
(``shared.steps.plans.release_values``): install and resync both compute it here, so that they agree.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from shared.model import rollout
from shared.model.cluster import Marker
from shared.model.rollout import Admission, Slot, State, Target
from shared.model.tenant import Tenant, TenantEvent
from shared.settings import Settings
from shared.steps import plans

log = logging.getLogger(__name__)

HALTED_REASON = "RolloutHalted"


class RolloutKube(Protocol):
    """What the rollout needs of the Kubernetes adapter (``shared.adapters.kube.Kube``)."""

    def get_tenant(self, namespace: str, name: str) -> Tenant | None: ...
    def record_event(self, tenant: Tenant, event: TenantEvent) -> None: ...
    def create_claim(self, tenant: Tenant, name: str, labels: Mapping[str, str]) -> bool: ...
    def get_claim(self, namespace: str, name: str) -> Marker | None: ...
    def delete_claim(self, namespace: str, name: str, resource_version: str) -> None: ...


def target(tenant: Tenant, settings: Settings) -> Target:
    """What this Tenant should run now: the pinned chart version and the digest of the values install
    passes to helm for it (``plans.release_values``: its plan's under what install computes, before
    ``keep_distro``). Raises ``UnknownPlan`` for a plan the platform lacks."""
    return Target.of(settings.chart_version, plans.release_values(tenant, settings))


Lookup = Callable[[str], Tenant | None]  # a Tenant of the Tenants' namespace by name


@dataclass(frozen=True)
class Slots:
    """The slots and the halt record as read: each slot's name, its Lease (None: free) and Tenant."""

    slots: tuple[tuple[str, Slot | None, Tenant | None], ...]
    halted: Slot | None

    def held_by(self, tenant: Tenant) -> Slot | None:
        return next((s for _, s, _ in self.slots if s is not None and s.holds(tenant)), None)


def read(kube: RolloutKube, namespace: str, max_parallel: int, lookup: Lookup | None = None) -> Slots:
    """The ``max_parallel`` slots and the halt record, with each slot's Tenant (``lookup``, else a GET)."""
    find: Lookup = lookup or (lambda name: kube.get_tenant(namespace, name))
    slots: list[tuple[str, Slot | None, Tenant | None]] = []
    for index in range(max_parallel):
        name = rollout.slot_name(index)
        marker = kube.get_claim(namespace, name)
        slot = Slot.of(name, marker.labels, marker.resource_version) if marker is not None else None
        slots.append((name, slot, find(slot.tenant) if slot is not None and slot.tenant else None))
    halt = kube.get_claim(namespace, rollout.HALT_NAME)
    halted = Slot.of(rollout.HALT_NAME, halt.labels, halt.resource_version) if halt is not None else None
    return Slots(tuple(slots), halted)


def listed(markers: Mapping[str, Marker], lookup: Lookup) -> Slots:
    """The slots and the halt record from the rollout's Leases as listed, by name (the command's
    view: every slot there, whatever ``ROLLOUT_MAX_PARALLEL`` the functions run with)."""
    slots = []
    for name in sorted(n for n in markers if n.startswith(rollout.SLOT_PREFIX)):
        slot = Slot.of(name, markers[name].labels, markers[name].resource_version)
        slots.append((name, slot, lookup(slot.tenant) if slot.tenant else None))
    halt = markers.get(rollout.HALT_NAME)
    halted = Slot.of(rollout.HALT_NAME, halt.labels, halt.resource_version) if halt is not None else None
    return Slots(tuple(slots), halted)


def admit(kube: RolloutKube, settings: Settings, tenant: Tenant, wanted: Target) -> bool:
    """May install upgrade ``tenant`` to ``wanted`` now (a fleet change)? True when it holds a slot,
    taken now if one is free; False (logged) while the rollout is halted or every slot is held."""
    namespace = settings.tenant_namespace
    for _ in range(3):  # a slot taken by another install between the read and the create: read again
        found = read(kube, namespace, settings.rollout_max_parallel)
        decision = rollout.admit(tenant, found.slots, found.halted)
        extra = {"slot": decision.slot, "chartVersion": wanted.chart_version, "valuesDigest": wanted.values_digest}
        if decision.admission == Admission.GO:
            log.info("fleet upgrade in its rollout slot", extra=extra)
            return True
        if decision.admission == Admission.HALTED:
            if found.halted is None:
                record_halt(kube, found)
            log.info(f"fleet upgrade not started: {decision.why}; kubeopera-tenants rollout resume", extra=extra)
            return False
        if decision.admission == Admission.WAIT:
            log.info(f"fleet upgrade waits: {decision.why}; resync sends it again", extra=extra)
            return False
        if decision.stale is not None:
            kube.delete_claim(namespace, decision.slot, decision.stale.resource_version)
        if kube.create_claim(tenant, decision.slot, rollout.slot_labels(tenant, wanted)):
            log.info("fleet upgrade took a rollout slot", extra=extra)
            return True
    log.info("fleet upgrade waits: the rollout slots kept changing hands", extra={"tenant": tenant.key})
    return False


def record_halt(kube: RolloutKube, found: Slots) -> Tenant | None:
    """Record the halt at the first slot whose Tenant is Failed (Lease ``rollout-halted``, owned by
    it), with a Warning Event on it; returns that Tenant, None when no slot's Tenant is Failed."""
    failed = rollout.halted_by(found.slots)
    holder = next((t for _, s, t in found.slots if s is failed), None) if failed is not None else None
    if failed is None or holder is None:
        return None
    if kube.create_claim(holder, rollout.HALT_NAME, rollout.halt_labels(holder)):
        message = (
            f"the fleet upgrade to chart {failed.target.chart_version} (values {failed.target.values_digest}) "
            f"stopped here: this Tenant failed it ({holder.status.message}); no further Tenant is upgraded. "
            "Fix it and retry it (kubeopera-tenants retry), then kubeopera-tenants rollout resume"
        )
        log.error("rollout halted", extra={"tenant": holder.key, "slot": failed.name})
        kube.record_event(holder, TenantEvent("Warning", HALTED_REASON, message))
    return holder


def resume(kube: RolloutKube, namespace: str, found: Slots) -> str:
    """End a halt: delete the halt record, and the slots (as ``found``) of Tenants still Failed
    (skipped, out of the rollout until retried). What was done, in a sentence."""
    done: list[str] = []
    for name, slot, holder in found.slots:
        if slot is not None and rollout.slot_failed(slot, holder):
            kube.delete_claim(namespace, name, slot.resource_version)
            done.append(f"released {name} of Failed Tenant {slot.tenant} (skipped; a retry upgrades it)")
    if found.halted is not None:
        kube.delete_claim(namespace, rollout.HALT_NAME, found.halted.resource_version)
        done.insert(0, f"removed the halt at Tenant {found.halted.tenant}")
    if not done:
        return "the rollout is not halted; nothing to resume"
    return "; ".join(done) + "; resync's next pass starts the next wave"


def states(tenants: Sequence[Tenant], behind: Mapping[str, bool], found: Slots) -> dict[str, State]:
    """Each Tenant's rollout state, by key (``behind``: ``rollout.behind`` of each, by key)."""
    return {t.key: rollout.state(t, behind.get(t.key, False), found.held_by(t), found.halted) for t in tenants}
