"""Who owns a namespace, release or Secret: the pure rules (design.md section 1, "Ownership").

Everything a Tenant causes carries the Tenant's identity in labels from the moment it is made
(``owner_labels``): the uid of the Tenant object, its namespace and its name. Before a function
touches such an object it reads the labels and ``judge`` says whose it is:

==========  ===============================================================  ===================
claim       the object                                                       the function
==========  ===============================================================  ===================
FREE        does not exist                                                   may create it
OURS        carries this Tenant's uid                                        may change it
ADOPT       has no uid, but exactly this Tenant's labels of the version      adds the uid once,
            before ownership (its name and cloudSpaceID): clusters already   then as OURS
            running that version
OTHER       carries another uid                                              refuses; who that
                                                                             owner is decides how
FOREIGN     has none of our labels (made by hand, or by something else)      refuses
==========  ===============================================================  ===================

For OTHER the owner's Tenant is looked up (``OwnerState``): still there, being deleted, or gone
(a leftover). ``refusal`` turns a claim into the error the Tenant is failed with; it never
suggests adopting silently, and always names what to do. ``orphaned_by`` finds a leftover without
a Tenant asking: resync sends each such namespace to cleanup, which removes it.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import OwnershipConflict, TemporaryError
from shared.model.naming import (
    LABEL_MANAGED_BY,
    LABEL_OWNER_NAME,
    LABEL_OWNER_NAMESPACE,
    LABEL_OWNER_UID,
    LABEL_TENANT_ID,
    LABEL_TENANT_NAME,
    MANAGED_BY,
)
from shared.model.tenant import Tenant

# How long a Tenant waits for another one's cleanup before asking again.
WAIT_FOR_CLEANUP_SECONDS = 5


class Claim(enum.Enum):
    FREE = "free"
    OURS = "ours"
    ADOPT = "adopt"
    OTHER = "other"
    FOREIGN = "foreign"


class OwnerState(enum.Enum):
    LIVE = "live"
    DELETING = "deleting"
    GONE = "gone"


@dataclass(frozen=True)
class Owner:
    """The Tenant object an object's labels name."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    owner: Owner | None = None

    @property
    def usable(self) -> bool:
        """This Tenant may act on the object (create, change or delete it)."""
        return self.claim in (Claim.FREE, Claim.OURS, Claim.ADOPT)

    @property
    def owned(self) -> bool:
        """The object exists and is this Tenant's: by its labels, or from before them (adopted)."""
        return self.claim in (Claim.OURS, Claim.ADOPT)


@dataclass(frozen=True)
class Thing:
    """An object a Tenant needs, for messages: ``namespace vcluster-x``, ``helm release ...``."""

    kind: str
    name: str
    how_to_remove: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


def owner_labels(tenant: Tenant) -> dict[str, str]:
    return {
        LABEL_OWNER_UID: tenant.uid,
        LABEL_OWNER_NAMESPACE: tenant.namespace,
        LABEL_OWNER_NAME: tenant.name,
    }


# What each object carried before ownership labels (the original operator's labels), which the
# ADOPT rule compares, and what it carries now: those plus the owner's.


def legacy_namespace_labels(tenant: Tenant) -> dict[str, str]:
    return {LABEL_TENANT_NAME: tenant.name, LABEL_TENANT_ID: tenant.spec.cloud_space_id, LABEL_MANAGED_BY: MANAGED_BY}


def namespace_labels(tenant: Tenant) -> dict[str, str]:
    return legacy_namespace_labels(tenant) | owner_labels(tenant)


def legacy_secret_labels(tenant: Tenant) -> dict[str, str]:
    return {LABEL_TENANT_ID: tenant.spec.cloud_space_id, LABEL_MANAGED_BY: MANAGED_BY}


def secret_labels(tenant: Tenant) -> dict[str, str]:
    return legacy_secret_labels(tenant) | owner_labels(tenant)


def legacy_release_labels(tenant: Tenant) -> dict[str, str]:
    """The labels our values put on the vCluster StatefulSet before ownership (values.py)."""
    return {LABEL_TENANT_NAME: tenant.spec.tenant_name, LABEL_TENANT_ID: tenant.spec.cloud_space_id}


def release_labels(values: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The labels a release's values put on the vCluster (None: no release). A release whose
    values carry none (installed by hand) has an empty dict: FOREIGN."""
    if values is None:
        return None
    labels: Any = values
    for key in ("controlPlane", "statefulSet", "labels"):
        labels = labels.get(key) if isinstance(labels, Mapping) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def judge(labels: Mapping[str, str] | None, tenant: Tenant, legacy: Mapping[str, str]) -> Verdict:
    """Whose is an object with these ``labels`` (None: it does not exist)?

    ``legacy`` are the labels this Tenant's object carried before ownership labels existed; an
    object with exactly those (and no uid) is this Tenant's, and is adopted.
    """
    if labels is None:
        return Verdict(Claim.FREE)
    uid = labels.get(LABEL_OWNER_UID)
    if uid == tenant.uid:
        return Verdict(Claim.OURS)
    if uid:
        owner = Owner(labels.get(LABEL_OWNER_NAMESPACE, "?"), labels.get(LABEL_OWNER_NAME, "?"), uid)
        return Verdict(Claim.OTHER, owner)
    if legacy and all(labels.get(k) == v for k, v in legacy.items()):
        return Verdict(Claim.ADOPT)
    return Verdict(Claim.FOREIGN)


def owner_of(labels: Mapping[str, str]) -> Owner | None:
    """The Tenant an object's owner labels name, or None when they name none completely."""
    found = [labels.get(key, "") for key in (LABEL_OWNER_NAMESPACE, LABEL_OWNER_NAME, LABEL_OWNER_UID)]
    return Owner(*found) if all(found) else None


def orphaned_by(labels: Mapping[str, str], namespace: str, live_uids: Collection[str]) -> Owner | None:
    """The Tenant in ``namespace`` (the Tenants' namespace) that an object's owner labels name, when
    no Tenant of that uid is there any more (``live_uids``): it went without its cleanup, and what
    it made is left behind. None when the owner lives, or the labels name none or another place."""
    uid = labels.get(LABEL_OWNER_UID)
    if not uid or uid in live_uids or labels.get(LABEL_OWNER_NAMESPACE) != namespace:
        return None
    return Owner(namespace, labels.get(LABEL_OWNER_NAME, "?"), uid)


def owner_state(owner: Owner, live: Tenant | None) -> OwnerState:
    """Is the owner named by the labels still there? ``live`` is the Tenant now at its name."""
    if live is None or live.uid != owner.uid:
        return OwnerState.GONE
    return OwnerState.DELETING if live.deleting else OwnerState.LIVE


def refusal(
    tenant: Tenant, thing: Thing, field: str, value: str, verdict: Verdict, state: OwnerState | None
) -> Exception:
    """The error for a Tenant that may not use ``thing`` (which its spec ``field`` = ``value``
    names): ``OwnershipConflict`` (the Tenant is Failed) or, while the owner is being deleted, a
    ``TemporaryError`` that asks again once its cleanup has had time to finish."""
    retry = f"then retry: kubeopera-tenants retry {tenant.name} -n {tenant.namespace}"
    if verdict.claim == Claim.OTHER and verdict.owner is not None:
        owner = verdict.owner
        if state == OwnerState.LIVE:
            return OwnershipConflict(f'{field} "{value}" is already used by Tenant {owner.key}')
        if state == OwnerState.DELETING:
            return TemporaryError(
                f'{field} "{value}" is still held by Tenant {owner.key}, which is being deleted; '
                "waiting for its cleanup",
                retry_after=WAIT_FOR_CLEANUP_SECONDS,
            )
        return OwnershipConflict(
            f"{thing} was left behind by Tenant {owner.key} (uid {owner.uid}), which no longer exists; "
            f"nothing adopts it silently: remove it ({thing.how_to_remove}), {retry}"
        )
    return OwnershipConflict(
        f"{thing} exists but was not made by kubeopera-tenants for this Tenant (no {LABEL_OWNER_UID} label); "
        f"nothing adopts it silently: remove it ({thing.how_to_remove}), or if it really is this Tenant's, "
        f"label it {LABEL_OWNER_UID}={tenant.uid}; {retry}"
    )


def rival(tenant: Tenant, others: list[Tenant]) -> Tenant | None:
    """The Tenant that asked first for this Tenant's ``tenantName`` or ``cloudSpaceID``, if any.

    Two Tenants that both exist and want one name: the older (creation time, then namespace and
    name, the same answer on every process) keeps it, the newer is refused before it makes
    anything. ``others`` may include ``tenant`` itself; it is skipped by uid.
    """
    mine = (tenant.spec.tenant_name, tenant.spec.cloud_space_id)
    claimants = [
        t for t in others if t.uid != tenant.uid and (t.spec.tenant_name == mine[0] or t.spec.cloud_space_id == mine[1])
    ]
    older = [t for t in claimants if _seniority(t) < _seniority(tenant)]
    return min(older, key=_seniority) if older else None


def rival_refusal(tenant: Tenant, other: Tenant) -> Exception:
    if other.spec.tenant_name == tenant.spec.tenant_name:
        field, value = "tenantName", tenant.spec.tenant_name
    else:
        field, value = "cloudSpaceID", tenant.spec.cloud_space_id
    if other.deleting:
        return TemporaryError(
            f'{field} "{value}" is still held by Tenant {other.key}, which is being deleted; waiting for its cleanup',
            retry_after=WAIT_FOR_CLEANUP_SECONDS,
        )
    return OwnershipConflict(f'{field} "{value}" is already used by Tenant {other.key}')


def _seniority(tenant: Tenant) -> tuple[str, str, str]:
    # RFC 3339 UTC timestamps of one format sort as text.
    return (tenant.created, tenant.namespace, tenant.name)
