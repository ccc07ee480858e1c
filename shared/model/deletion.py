"""What a Tenant's deletion does next, from what cleanup read: decided once, then done.

cleanup (``functions/cleanup.py``) reads the Tenant's namespace and its stored kubeconfig Secret
and judges whose each is (``shared.model.ownership``). :func:`plan` says what to do with each: the
namespace is the Tenant's and still there (uninstall the release, then delete it), being deleted
(wait), someone else's (leave it, and say so) or absent; the Secret is the Tenant's (delete it),
someone else's (leave it) or absent. The deletion is done when no namespace of the Tenant's is left
to wait for. While it waits, :func:`progress` says whether it moved since the Tenant's message was
written, goes on, or has stalled for longer than cleanup allows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from shared.model.cluster import NamespaceInfo
from shared.model.ownership import Verdict


class Do(enum.Enum):
    """What to do with one object of the Tenant's."""

    NOTHING = "nothing"  # it is not there
    DELETE = "delete"  # ours: for the namespace, uninstall the release first
    WAIT = "wait"  # ours, and already being deleted
    LEAVE = "leave"  # someone else's: left alone, with a Warning Event saying whose


@dataclass(frozen=True)
class DeletionPlan:
    namespace: Do
    secret: Do
    waiting_for: str = ""  # what the deletion waits for, for the Tenant's message; "" when done

    @property
    def done(self) -> bool:
        return not self.waiting_for


def plan(
    namespace_name: str,
    namespace: NamespaceInfo | None,
    namespace_verdict: Verdict,
    secret_present: bool,
    secret_verdict: Verdict,
) -> DeletionPlan:
    """The deletion's next step for both objects, from what was read of them."""
    if namespace is None:
        on_namespace = Do.NOTHING
    elif not namespace_verdict.owned:
        on_namespace = Do.LEAVE
    else:
        on_namespace = Do.WAIT if namespace.terminating else Do.DELETE
    on_secret = (Do.DELETE if secret_verdict.owned else Do.LEAVE) if secret_present else Do.NOTHING
    waiting = ""
    if on_namespace in (Do.DELETE, Do.WAIT) and namespace is not None:
        remaining = f" ({namespace.remaining})" if namespace.remaining else ""
        waiting = f"namespace {namespace_name} to be deleted{remaining}"
    return DeletionPlan(on_namespace, on_secret, waiting)


class Progress(enum.Enum):
    MOVED = "moved"  # what it waits for changed: write it (and the time) as the Tenant's message
    WAITING = "waiting"  # unchanged, for less than the stall limit
    STALLED = "stalled"  # unchanged for longer than the stall limit: give up (CleanupFailed)


def progress(
    message: str, last_message: str | None, last_synced: datetime | None, now: datetime, stall_seconds: float
) -> tuple[Progress, float]:
    """Whether the deletion moved since the Tenant's message was written, and how long it has not."""
    if message != last_message:
        return Progress.MOVED, 0.0
    still = (now - last_synced).total_seconds() if last_synced else 0.0
    return (Progress.STALLED if still > stall_seconds else Progress.WAITING), still
