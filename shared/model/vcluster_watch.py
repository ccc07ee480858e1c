"""What the vCluster watch sees of a vCluster's StatefulSet, and which changes are worth a look.

``functions.vcluster_watch`` lists and then watches, over all namespaces, the StatefulSets that
carry our owner labels (``SELECTOR``), and tells check-ready about each change that may move a
Tenant's readiness (``io.kubeopera.tenant.vcluster.changed``). This module is the decision, apart
from the watch itself: a StatefulSet seen is a ``Seen`` (where it is, whose it is, its rollout);
a change is worth a look when the rollout differs from the one last seen (a new StatefulSet, one
gone, or its controller or kubelet reporting something new). Metadata alone (a label, an
annotation, managed fields, a resync of the same object) moves no readiness and is no look.

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


def worth_a_look(before: Seen | None, after: Seen | None) -> bool:
    """Whether a change from ``before`` to ``after`` (None: not there) may move readiness."""
    if before is None or after is None:
        return before is not after
    return before.rollout != after.rollout or before.owner != after.owner


def relisted(known: Mapping[Key, Seen], listed: Mapping[Key, Seen]) -> Iterator[Seen]:
    """After a re-list: each StatefulSet new or changed since ``known`` (as listed), and each gone
    (as last known), for the Tenant it names."""
    for key, now in listed.items():
        if worth_a_look(known.get(key), now):
            yield now
    for key, then in known.items():
        if key not in listed:
            yield then


def tenant_of(seen: Seen, namespace: str | None) -> TenantRef | None:
    """The Tenant a change is about, when it names one in ``namespace`` (the Tenants' namespace
    this installation serves; None: any). Generation 0: a hint names no generation of the
    Tenant, check-ready reads the live one."""
    owner = seen.owner
    if owner is None or (namespace is not None and owner.namespace != namespace):
        return None
    return TenantRef(namespace=owner.namespace, name=owner.name, uid=owner.uid, generation=0)
