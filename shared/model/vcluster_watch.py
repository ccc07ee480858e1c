"""What the vCluster watch sees of a vCluster's StatefulSet, and which changes are worth a look.

``functions.vcluster_watch`` lists and then watches, over all namespaces, the StatefulSets that
carry our owner labels (``SELECTOR``), and tells check-ready about each change that may move a
Tenant's readiness (``io.kubeopera.tenant.vcluster.changed``). This module is the decision, apart
from the watch itself: a StatefulSet seen is a ``Seen`` (where it is, whose it is, its rollout);
a change is worth a look when it changes what check-ready's look decides on (``look_reads``):
whether the current spec is rolled out with every replica ready (``Rollout.done``: a
provisioning Tenant is ready), and how many of how many pods are ready (``VClusterAvailable`` of
a Ready Tenant, and its message). Anything else moves no readiness and is no look: metadata (a
label, an annotation, managed fields), the controller's intermediate steps (a new generation
observed, pods updated but not ready yet), a new StatefulSet with nothing ready, and one gone (the
look finds nothing to do: resync re-installs a release whose StatefulSet went).
tests/unit/test_vcluster_watch.py runs check-ready's real look over rollouts that ``look_reads``
deems alike, and checks it answers and writes the same for each.

After a watch expires (410 Gone: the API server no longer holds the history from our
resourceVersion) the watch lists again; ``relisted`` compares that list with what was last seen,
so a change made while no watch was open is not lost, as an informer's re-list does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from shared.model.cluster import Rollout
from shared.model.naming import LABEL_OWNER_UID
from shared.model.ownership import Owner
from shared.model.tenant import TenantRef

# The StatefulSets watched: those install's values label with their Tenant's uid (with its name
# and namespace), in whatever namespace. A tenant's own workloads, synced by its vCluster, carry
# no such label (the syncer writes pods, Secrets and Services; never a StatefulSet of the host).
SELECTOR = LABEL_OWNER_UID

Key = tuple[str, str]  # (namespace, name) of a StatefulSet


@dataclass(frozen=True)
class Seen:
    """One StatefulSet as a LIST or a watch event gave it."""

    namespace: str
    name: str
    owner: Owner | None  # the Tenant its owner labels name; None when they name none completely
    rollout: Rollout

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class Change:
    """One event of the watch: ``ADDED``, ``MODIFIED``, ``DELETED`` (``seen`` as it was last), or
    ``BOOKMARK`` (no object: the API server's word that the watch is current up to
    ``resource_version``)."""

    kind: str
    seen: Seen | None
    resource_version: str


def look_reads(rollout: Rollout) -> tuple[bool, int, int]:
    """What check-ready's look decides on, of a StatefulSet's rollout (``functions.check_ready.look``,
    ``shared.model.health.availability``)."""
    return (rollout.done, rollout.ready_replicas, rollout.replicas)


def worth_a_look(before: Seen | None, after: Seen | None) -> bool:
    """Whether a change from ``before`` to ``after`` (None: not there) may change what check-ready's
    look finds: a StatefulSet gone never does; a new one does once something of it is ready."""
    if after is None:
        return False
    if before is None:
        return after.rollout.done or after.rollout.ready_replicas > 0
    return look_reads(before.rollout) != look_reads(after.rollout) or before.owner != after.owner


def relisted(known: Mapping[Key, Seen], listed: Mapping[Key, Seen]) -> Iterator[Seen]:
    """After a re-list: each StatefulSet new or changed since ``known`` in a way worth a look."""
    for key, now in listed.items():
        if worth_a_look(known.get(key), now):
            yield now


def tenant_of(seen: Seen, namespace: str | None) -> TenantRef | None:
    """The Tenant a change is about, when it names one in ``namespace`` (the Tenants' namespace
    this installation serves; None: any). Generation 0: a hint names no generation of the
    Tenant, check-ready reads the live one."""
    owner = seen.owner
    if owner is None or (namespace is not None and owner.namespace != namespace):
        return None
    return TenantRef(namespace=owner.namespace, name=owner.name, uid=owner.uid, generation=0)
