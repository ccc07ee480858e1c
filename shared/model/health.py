"""Whether a Ready Tenant's vCluster works now: the condition ``VClusterAvailable``, kept after Ready.

Phase ``Ready`` (the original operator's) and the condition ``Ready`` say the vCluster was
provisioned for the Tenant's generation and answered through its kubeconfig once. Neither changes
when it stops working a week later. ``VClusterAvailable`` does: notify-api writes it True with
Ready (check-ready has just seen the control plane ready and its API answer); check-ready's look at
each change of the vCluster's StatefulSet (the vCluster watch), and resync's pass over every Tenant,
keep it (``shared.steps.availability``): no ready control-plane pod makes it False, reason
``ControlPlaneNotReady``; a ready pod whose API does not answer through the stored kubeconfig
(resync asks it on each pass by default, on one pass in ``VCLUSTER_LOOK_PASSES`` otherwise; a
pass that does not ask leaves a False condition as it is while a pod is ready: ``unasked``)
False, reason ``APINotServing``; a ready one that answers True again, reason
``ControlPlaneReady``. Each change is
written once, with an Event (``VClusterUnavailable``, a Warning; ``VClusterAvailable``); a pass
that finds nothing changed writes nothing. The phase stays Ready throughout: it says what
provisioning reached, as the original defines it.
"""

from __future__ import annotations

from shared.model.cluster import Rollout
from shared.model.tenant import COND_AVAILABLE, Condition, Tenant, TenantEvent

AVAILABLE = "ControlPlaneReady"
UNAVAILABLE = "ControlPlaneNotReady"
NOT_SERVING = "APINotServing"


def available(generation: int, message: str = "the vCluster's control plane is ready") -> Condition:
    return Condition(COND_AVAILABLE, "True", AVAILABLE, message, generation)


def availability(rollout: Rollout, generation: int, api_missing: str | None = None) -> Condition:
    """The condition the vCluster's StatefulSet, as read, says: True while a control-plane pod is
    ready and, when it was asked (``api_missing``: what its API lacked through the stored
    kubeconfig, None when it answered or was not asked), its API answers. ``api_missing`` is the
    probe's own sentence (``shared.adapters.vcluster_api.verdict``: which API, what it lacked) and
    is the message as it is."""
    if rollout.ready_replicas == 0:
        return Condition(
            COND_AVAILABLE,
            "False",
            UNAVAILABLE,
            f"no pod of the vCluster's control plane is ready ({rollout.ready_replicas}/{rollout.replicas} ready)",
            generation,
        )
    if api_missing is not None:
        return Condition(COND_AVAILABLE, "False", NOT_SERVING, api_missing, generation)
    return available(generation, f"the vCluster's control plane is ready ({rollout.ready_replicas} ready)")


def unasked(rollout: Rollout, tenant: Tenant) -> Condition:
    """The condition a look that did not ask the vCluster's API says (a resync pass that did not
    look at this Tenant closely, ``shared.model.cadence``, or had no stored kubeconfig to ask
    with): no ready pod is ``ControlPlaneNotReady`` as always; with a ready pod, a False condition
    stays as it is, since only asking may say that the API answers again (check-ready asks at the
    pod's change, resync at its next close look), and otherwise the pod's word, True."""
    current = tenant.status.condition(COND_AVAILABLE)
    if rollout.ready_replicas > 0 and current is not None and current.status == "False":
        return current
    return availability(rollout, tenant.generation)


def changed(tenant: Tenant, wanted: Condition) -> bool:
    """Whether the Tenant says otherwise (another status or reason, or nothing yet)."""
    current = tenant.status.condition(COND_AVAILABLE)
    return current is None or (current.status, current.reason) != (wanted.status, wanted.reason)


def event_for(condition: Condition) -> TenantEvent:
    if condition.status == "True":
        return TenantEvent("Normal", "VClusterAvailable", condition.message)
    return TenantEvent("Warning", "VClusterUnavailable", condition.message)
