"""Keep a Ready Tenant's ``VClusterAvailable`` as its StatefulSet says now: the one writer of it
after Ready, for resync's pass and for check-ready's look at a changed StatefulSet.

The rule itself (True while a control-plane pod is ready, False otherwise, and what counts as a
change) is ``shared.model.health``'s; this step reads nothing, writes the condition only when it
changed, and records the change as an Event on the Tenant.
"""

from __future__ import annotations

import logging

from shared.model import health
from shared.model.tenant import Condition, StatusUpdate, Tenant
from shared.steps.reconcile import TenantStore, write_status

log = logging.getLogger(__name__)


def keep(kube: TenantStore, tenant: Tenant, wanted: Condition) -> Tenant | None:
    """Write ``wanted`` (``health.availability`` of what was read) when it differs from what the
    Tenant says, with its Event; the Tenant as written (a later write in the same turn goes from
    it), None when nothing was. A failed write raises the adapter's ``TenantError``: the caller
    decides whether that is for the next pass."""
    if not health.changed(tenant, wanted):
        return None
    written = write_status(kube, tenant, StatusUpdate(conditions=(wanted,)))
    kube.record_event(tenant, health.event_for(wanted))
    log.info("vCluster availability changed", extra={"available": wanted.status, "reason": wanted.reason})
    return written
