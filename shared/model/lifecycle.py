"""The Tenant's lifecycle in one place: the pipeline's steps, and what a Tenant needs next.

**The steps** (``STEPS``, one row each): the function (its Knative Service), the event types its
Trigger takes, what it replies, whether it polls through the broker's re-delivery, the event
resync sends to re-drive it, and what its dead letter means. dead-letter, resync, the router and
the manifests' tests read this table; adding a step is a row here, a function module and its
manifests (``deploy/base/services``, ``deploy/base/rbac``, ``eventing/triggers``).

**The decisions** are pure, over a Tenant as the API server (or an event's object) shows it:

- ``is_settled``: install's work for this generation is done (Provisioning or Ready at its
  generation, with its release installed);
- ``wants_install``: install has work (a new generation, Pending, a settled Tenant without the
  finalizer: provisioned by the version before ownership), unless it is Failed (it waits for a
  person) or being deleted (cleanup's work);
- ``wants_cleanup``: being deleted with our finalizer on, and cleanup has not given up;
- ``accepted_by_install``: install's first write to a Tenant (the finalizer on a new one, still
  in the Pending the CRD gives it; the retry it accepts): install is already on it;
- ``next_step``: what the router sends for a Tenant change (install, cleanup or nothing);
- ``failed_since``: when the Tenant's last failure or retry was recorded (dead-letter ignores an
  event made before it: the step recorded its own failure, or a retry has superseded it);
- ``unacknowledged_retry``: a Failed Tenant patched to Pending by hand (``kubectl patch``), which
  install marks as a retry when it first sees it (``reconcile.accept_retry``);
- ``poll_heard``, ``heartbeat_due`` and ``poll_chain_lost``: whether check-ready's poll of a
  Provisioning Tenant is alive. The poll is the broker's re-delivery and writes nothing, so every
  ``HEARTBEAT_POLLS`` polls check-ready writes ``lastPolledAt``; resync re-drives the poll only
  when neither that nor install's ``lastSyncedAt`` is recent, so a live chain is left alone (a
  second chain would poll twice and could tell kubeopera-api twice);
- ``ready_announced``: check-ready has just seen the vCluster up and sent the ready event on (its
  poll or its look at the vCluster's change, whichever first): the other sends nothing;
- ``provision_started``, ``provision_elapsed``, ``timed_out`` and ``timeout_message``: the
  provision timeout, as check-ready and resync both judge it, counted from the ``lastSyncedAt`` of
  the write that began the phase: install's Provisioning, or the Pending that a retry or
  resync's re-install wrote, or resync's mark on a new Tenant it found that no step had written
  (``unwritten``: its Pending is the CRD's default). Pending counts too: a Tenant that install
  never gets to provision (its deliveries lost, its Trigger gone) is Failed, not Pending for
  ever.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from shared.errors import CleanupStalled
from shared.model import event_types
from shared.model.tenant import COND_READY, COND_RELEASE_INSTALLED, Phase, Tenant, parse_time

# The reason of the Ready condition when cleanup gave up (CleanupStalled, or its dead letter).
CLEANUP_FAILED: Final = CleanupStalled.reason
# The Ready condition's reasons while a Tenant is on its way: install's, and check-ready's while the
# vCluster's API does not serve yet. Any other Ready=False says the Tenant failed
# (reconcile.failed_update), and when.
PROVISIONING_REASON: Final = "Provisioning"
NOT_SERVING_REASON: Final = "VClusterNotServing"
# The Ready condition's reasons of a retry, each with the ``lastSyncedAt`` of when it was made:
# ``kubeopera-tenants retry`` writes RetryRequested with the phase Pending; install writes
# RetryAccepted when it first sees a Tenant patched to Pending by hand, which kept its failure's.
RETRY_REQUESTED_REASON: Final = "RetryRequested"
RETRY_ACCEPTED_REASON: Final = "RetryAccepted"
# ... and once check-ready has seen the vCluster up and sent its ready event on (ready_announced).
VCLUSTER_UP_REASON: Final = "VClusterUp"
_ON_ITS_WAY: Final = frozenset({PROVISIONING_REASON, NOT_SERVING_REASON, VCLUSTER_UP_REASON})
_RETRY: Final = frozenset({RETRY_REQUESTED_REASON, RETRY_ACCEPTED_REASON})


class DeadLetter(enum.Enum):
    """What the dead-letter sink does when the broker gives up on a step's event."""

    FAIL = "DeliveryFailed"  # the Tenant is Failed, reason DeliveryFailed, with the step's last answer
    FAIL_CLEANUP = CLEANUP_FAILED  # the Tenant is Failed, reason CleanupFailed: it waits for a person
    NOTHING = "nothing"  # the event only routed: resync re-drives whatever it would have started


@dataclass(frozen=True)
class Step:
    """One function of the pipeline, as the broker and resync see it."""

    function: str  # its Knative Service (and ServiceAccount, Trigger, sender audience)
    takes: frozenset[str]  # the event types its Trigger passes
    replies: frozenset[str] = frozenset()  # the event types it may answer with
    polls: bool = False  # answers 503 + Retry-After while it waits (the broker's re-delivery polls)
    redrive: str | None = None  # the event resync sends when this step's event was lost
    dead_letter: DeadLetter = DeadLetter.FAIL
    # Event types it takes as a hint only, through a Trigger of its own (``<function>-hint``):
    # losing one changes nothing (the step's own events, or resync, still come), so a dead-lettered
    # hint fails no Tenant.
    hints: frozenset[str] = frozenset()

    @property
    def accepts(self) -> frozenset[str]:
        """Every event type the function answers: its Trigger's and its hint Trigger's."""
        return self.takes | self.hints

    @property
    def hint_trigger(self) -> str | None:
        """The name of the Trigger its hints come through, when it takes any."""
        return f"{self.function}-hint" if self.hints else None

    def dead_letter_of(self, event_type: str) -> DeadLetter:
        """What the broker giving up on an event of ``event_type`` to this step means."""
        return DeadLetter.NOTHING if event_type in self.hints else self.dead_letter


ROUTER = Step(
    "tenant-router",
    takes=frozenset({event_types.APISERVER_ADD, event_types.APISERVER_UPDATE, event_types.APISERVER_DELETE}),
    replies=frozenset({event_types.INSTALL, event_types.CLEANUP}),
    dead_letter=DeadLetter.NOTHING,
)
INSTALL = Step(
    "tenant-install",
    takes=frozenset({event_types.INSTALL}),
    replies=frozenset({event_types.PROVISIONING}),
    redrive=event_types.INSTALL,
)
CHECK_READY = Step(
    "tenant-check-ready",
    takes=frozenset({event_types.PROVISIONING}),
    replies=frozenset({event_types.READY, event_types.PROVISIONING}),  # a fresh poll event: events.renewal_due
    polls=True,
    redrive=event_types.PROVISIONING,
    hints=frozenset({event_types.VCLUSTER_CHANGED}),  # the vCluster watch's (functions.vcluster_watch)
)
STORE_KUBECONFIG = Step(
    "tenant-store-kubeconfig",
    takes=frozenset({event_types.READY}),
    replies=frozenset({event_types.KUBECONFIG_STORED}),
    redrive=event_types.READY,
)
NOTIFY_API = Step(
    "tenant-notify-api",
    takes=frozenset({event_types.KUBECONFIG_STORED}),
    replies=frozenset({event_types.INSTALL}),  # the next Tenant of a fleet upgrade (shared.model.rollout)
    redrive=event_types.KUBECONFIG_STORED,
)
CLEANUP = Step(
    "tenant-cleanup",
    takes=frozenset({event_types.CLEANUP}),
    replies=frozenset({event_types.CLEANUP}),  # a fresh poll event: events.renewal_due
    polls=True,
    redrive=event_types.CLEANUP,
    dead_letter=DeadLetter.FAIL_CLEANUP,
)
RESYNC = Step("tenant-resync", takes=frozenset({event_types.PING}), dead_letter=DeadLetter.NOTHING)

# In the order a Tenant meets them. dead-letter is every Trigger's sink, not a step.
STEPS: Final = (ROUTER, INSTALL, CHECK_READY, STORE_KUBECONFIG, NOTIFY_API, CLEANUP, RESYNC)


def _by_type() -> Mapping[str, Step]:
    table: dict[str, Step] = {}
    for step in STEPS:
        for event_type in step.accepts:
            if event_type in table:
                raise AssertionError(f"{event_type} is taken by {table[event_type].function} and {step.function}")
            table[event_type] = step
    return table


STEP_FOR_TYPE: Final = _by_type()  # each event type goes to exactly one step
# The types whose event names a Tenant: every step's but resync's tick (what dead-letter may get).
TENANT_EVENT_TYPES: Final = frozenset(STEP_FOR_TYPE) - RESYNC.takes


def is_settled(tenant: Tenant) -> bool:
    """Provisioning or Ready for the current generation, with its release installed."""
    return (
        tenant.status.phase in (Phase.PROVISIONING, Phase.READY)
        and tenant.status.observed_generation == tenant.generation
        and tenant.status.is_true(COND_RELEASE_INSTALLED, tenant.generation)
    )


def gave_up(tenant: Tenant) -> bool:
    """Cleanup failed (reason CleanupFailed): like any Failed Tenant it waits for a person, who
    fixes the cause and patches the phase to Pending (``kubeopera-tenants retry``). Without this,
    the very status write that says so would start cleanup again at once."""
    ready = tenant.status.condition(COND_READY)
    return tenant.status.phase == Phase.FAILED and ready is not None and ready.reason == CLEANUP_FAILED


def wants_cleanup(tenant: Tenant) -> bool:
    """Being deleted, with our finalizer still on, and cleanup has not given up."""
    return tenant.deleting and tenant.has_finalizer and not gave_up(tenant)


def install_skip_reason(tenant: Tenant) -> str | None:
    """Why install leaves this Tenant alone, or None if it has work to do. A settled Tenant
    without the finalizer was provisioned by the version before ownership: it goes through
    install once more, which adds the finalizer and the owner labels (one helm revision)."""
    if tenant.deleting:
        return "tenant is being deleted; cleanup's work"
    if tenant.status.phase == Phase.FAILED:
        return "tenant is Failed; it waits for its phase to be patched to Pending"
    if is_settled(tenant) and tenant.has_finalizer:
        return "tenant already provisioned for this generation"
    return None


def wants_install(tenant: Tenant) -> bool:
    return install_skip_reason(tenant) is None


def unwritten(tenant: Tenant) -> bool:
    """Has no step written this Tenant's status yet? A new Tenant reads Pending from the CRD's
    default (deploy/crd/tenants.yaml), with no condition and no ``lastSyncedAt``."""
    status = tenant.status
    return status.phase == Phase.PENDING and not status.conditions and not status.last_synced_at


def accepted_by_install(tenant: Tenant) -> bool:
    """Is this change install's own first write to the Tenant, so that install is on it already?
    For a new Tenant, which reads Pending from the CRD's default with no write (no condition, no
    ``lastSyncedAt``), that write is the finalizer, at the generation it was created with (1)
    (before this version install wrote the Pending, with a ``lastSyncedAt``, and then the
    finalizer: either is its own); for a Failed one patched to Pending by hand, Ready=False
    ``RetryAccepted``. Every other Pending is someone else's: a new Tenant's creation (no
    finalizer yet), ``kubeopera-tenants retry``'s (``RetryRequested``), a hand retry not yet seen
    (the failure's reason), resync's for a Ready Tenant whose release is gone (the conditions of
    Ready). So install's own write, and what it writes next, need no further install: the
    delivery that wrote them is at work (if it dies, the broker re-delivers its event, and resync
    re-drives a Tenant left Pending). A Tenant created with our finalizer already on (restored from
    a backup) looks the same, which is why ``next_step`` asks whether the change is a creation. A
    spec edited meanwhile is a new generation, and goes to install: the delivery at work may have
    read the old one."""
    if tenant.status.phase != Phase.PENDING:
        return False
    if not tenant.status.conditions:
        return tenant.generation == 1 and (tenant.has_finalizer or bool(tenant.status.last_synced_at))
    ready = tenant.status.condition(COND_READY)
    return ready is not None and ready.status == "False" and ready.reason == RETRY_ACCEPTED_REASON


def next_step(tenant: Tenant, created: bool = False) -> str | None:
    """What the router sends for a Tenant change, decided from the changed object and ``created``:
    the event type of the step that has work (install's or cleanup's), or None. A cleanup already
    running (phase Deleting) polls on its own event; resync re-drives one that stalls.

    ``created``: the change is an add (the Tenant's creation, or the source listing it again after
    a restart), which no write of a step's can be. So a Tenant that wants install goes there even
    when it looks like install's own first write: one created with our finalizer already on
    (restored from a backup) is provisioned at once, not at resync's next tick. A Tenant install is
    at work on, listed again, gets a second delivery, which install coalesces with the one at work
    (``shared.steps.locks``) or finds nothing left to do."""
    if tenant.deleting:
        return event_types.CLEANUP if wants_cleanup(tenant) and tenant.status.phase != Phase.DELETING else None
    if wants_install(tenant) and (created or not accepted_by_install(tenant)):
        return event_types.INSTALL
    return None


def failed_since(tenant: Tenant) -> datetime | None:
    """When the Tenant's last failure or retry was recorded, or None: while its Ready condition is
    False with a failure's reason or a retry's, the ``lastSyncedAt`` that write made
    (``reconcile.failed_update``, ``reconcile.retry_update``; not the condition's
    ``lastTransitionTime``, which moves only when its status does: from install's Ready=False
    "Provisioning" to a failure it stays). An event made before it is superseded: the step
    recorded its failure, or a retry came after it. A retry by hand (only the phase patched)
    keeps the failure's until install accepts it (``RetryAccepted``)."""
    if tenant.status.phase not in (Phase.FAILED, Phase.PENDING):  # moved on since (Deleting writes lastSyncedAt)
        return None
    ready = tenant.status.condition(COND_READY)
    if ready is None or ready.status != "False" or ready.reason in _ON_ITS_WAY:
        return None
    return parse_time(tenant.status.last_synced_at)


def unacknowledged_retry(tenant: Tenant) -> bool:
    """Pending, with the Ready=False of a failure still on: a Failed Tenant patched to Pending by
    hand, whose ``lastSyncedAt`` is still the failure's (not when the retry began)."""
    ready = tenant.status.condition(COND_READY)
    return (
        tenant.status.phase == Phase.PENDING
        and ready is not None
        and ready.status == "False"
        and ready.reason not in _ON_ITS_WAY | _RETRY
    )


# check-ready writes its heartbeat (``lastPolledAt``) every this many polls of a Tenant; resync
# takes a chain for lost once two more polls have passed without one.
HEARTBEAT_POLLS: Final = 4
LOST_AFTER_POLLS: Final = HEARTBEAT_POLLS + 2


def poll_heard(tenant: Tenant) -> datetime | None:
    """The last sign of a Provisioning Tenant's poll chain: install's ``lastSyncedAt`` (its reply
    starts the chain) or check-ready's later ``lastPolledAt``; None when neither is there."""
    times = [t for t in (parse_time(tenant.status.last_synced_at), parse_time(tenant.status.last_polled_at)) if t]
    return max(times, default=None)


def heartbeat_due(tenant: Tenant, now: datetime, poll_seconds: int) -> bool:
    """Should this poll write ``lastPolledAt``? Every ``HEARTBEAT_POLLS`` polls: a Tenant that
    boots within them is never written by its poll."""
    heard = poll_heard(tenant)
    return heard is None or (now - heard).total_seconds() >= HEARTBEAT_POLLS * poll_seconds


def poll_chain_lost(tenant: Tenant, now: datetime, poll_seconds: int) -> bool:
    """Has the Provisioning Tenant's poll gone quiet for longer than a live one ever is (its
    events lost: a broker restarted, a reply not delivered)? Then resync starts it again."""
    heard = poll_heard(tenant)
    return heard is None or (now - heard).total_seconds() > LOST_AFTER_POLLS * poll_seconds


def ready_announced(tenant: Tenant, now: datetime, poll_seconds: int) -> bool:
    """Has check-ready just said that this generation's vCluster is up (condition ``Ready`` False,
    reason ``VClusterUp``, written with ``lastPolledAt``), its ready event on its way? Then another
    look or poll that finds it up sends nothing: one ready event per provisioning, however the
    poll and the look at the vCluster's change meet. Just: until resync would count the chain
    as lost (``poll_chain_lost``); a ready event lost since is sent again by the poll resync starts."""
    ready = tenant.status.condition(COND_READY)
    if ready is None or ready.reason != VCLUSTER_UP_REASON or ready.observed_generation != tenant.generation:
        return False
    return not poll_chain_lost(tenant, now, poll_seconds)


def provision_started(tenant: Tenant) -> datetime | None:
    """When the phase that counts toward the provision timeout began, None when unknown (never
    timed out then, only checked): a Provisioning Tenant's ``lastSyncedAt`` (install's), a Pending
    one's (a retry's, resync's re-install, or resync's mark on a Tenant no step had written,
    ``unwritten``), unless it is a retry by hand that install has not seen yet (its time is the
    failure's). Never the creation: Tenants made while the pipeline was down count from when
    install was asked for them, not from before."""
    if tenant.status.phase == Phase.PROVISIONING or (
        tenant.status.phase == Phase.PENDING and not unacknowledged_retry(tenant)
    ):
        return parse_time(tenant.status.last_synced_at)
    return None


def provision_elapsed(tenant: Tenant, now: datetime) -> float | None:
    """Seconds since the phase that counts toward the provision timeout began, None when unknown."""
    since = provision_started(tenant)
    return (now - since).total_seconds() if since else None


def timed_out(tenant: Tenant, now: datetime, timeout_seconds: int) -> float | None:
    """The seconds since provisioning began when they are past the provision timeout, else None
    (also when unknown: a Tenant with no start time is never timed out, only checked)."""
    elapsed = provision_elapsed(tenant, now)
    return elapsed if elapsed is not None and elapsed > timeout_seconds else None


def timeout_message(elapsed: float, timeout_seconds: int, detail: str, phase: Phase = Phase.PROVISIONING) -> str:
    """What a Tenant Failed at its provision timeout says, whoever found it."""
    if phase == Phase.PENDING:
        began = f"still Pending {elapsed:.0f}s after install was asked for it"
    else:
        began = f"vCluster not ready {elapsed:.0f}s after provisioning began"
    return f"{began} (PROVISION_TIMEOUT_SECONDS={timeout_seconds}): {detail}"
