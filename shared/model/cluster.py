"""What the Kubernetes adapter reads of the cluster, as values: a namespace, a StatefulSet's
rollout, a Secret, a claim marker, a volume.

``shared.adapters.kube`` makes them from the API's answers; the steps decide on them, and the unit
tests' fakes return them, without a Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class Marker:
    """A claim object's labels, and the version read (to delete exactly it)."""

    labels: Mapping[str, str]
    resource_version: str


@dataclass(frozen=True)
class Volume:
    """A PersistentVolume once bound to a claim in a given namespace."""

    name: str
    claim: str  # namespace/name of the claim it was bound to
    reclaim_policy: str  # Retain, Delete (or Recycle)
    phase: str  # Bound, Released, ...; "" when no controller has set it
    resource_version: str


@dataclass(frozen=True)
class NamespaceInfo:
    labels: Mapping[str, str]
    terminating: bool
    remaining: str = ""  # while terminating: what the namespace controller says it waits for


@dataclass(frozen=True)
class OwnedNamespace:
    """A namespace that carries a Tenant's owner labels (``shared.model.ownership``)."""

    name: str
    labels: Mapping[str, str]
    created: datetime
    terminating: bool


@dataclass(frozen=True)
class Rollout:
    """A StatefulSet's spec generation and what its controller and kubelet report of it."""

    generation: int
    observed_generation: int
    replicas: int
    ready_replicas: int
    updated_replicas: int

    @property
    def done(self) -> bool:
        """The current spec is rolled out and every replica of it is ready."""
        return (
            self.observed_generation >= self.generation
            and self.updated_replicas == self.replicas
            and self.ready_replicas == self.replicas
        )


@dataclass(frozen=True)
class StoredSecret:
    """A Secret as read: its labels, its decoded data (never printed) and its version."""

    labels: Mapping[str, str]
    data: Mapping[str, bytes] = field(repr=False)
    resource_version: str


@dataclass(frozen=True)
class LeaseHold:
    """Who holds a Lease, when the hold was last renewed, and for how long a renewal counts."""

    holder: str  # "" when nobody holds it
    renewed: datetime | None  # the renew time, else the acquire time
    duration_seconds: int

    def free_for(self, holder: str, now: datetime) -> bool:
        """May ``holder`` take the Lease: nobody holds it, it is ``holder``'s already, or the hold
        has not been renewed for longer than its duration (its holder died or hangs)."""
        expired = self.renewed is None or (now - self.renewed).total_seconds() > self.duration_seconds
        return not self.holder or self.holder == holder or expired
