"""Which Ready Tenants a resync pass looks at closely: the vCluster's own kubeconfig Secret and its API.

Every pass reads the whole fleet from a fixed number of LISTs (``functions.resync.FleetReads``):
the StatefulSets, the stored kubeconfigs, the namespace policies. A close look adds, for one
Tenant, a read of vcluster's Secret by name and a TLS probe of its API (``shared.adapters.vcluster_api``),
and costs a pass about 6.6 ms per Tenant (``python -m bench resync``, 2026-12-07). By default
(``VCLUSTER_LOOK_PASSES=1``) every Ready Tenant gets one on every pass. A larger fleet can spread
them: with ``passes`` = N, each pass looks closely at about one Tenant in N, and each Tenant is
looked at closely once every N ticks.

The choice is stateless, so it holds across restarts and scale-to-zero: a Tenant's share is its
uid's hash modulo N, and a pass takes the share of its tick's number: the tick event's ``time``
(mtping sets it when it sends, within a second of the schedule) in ``tick_seconds``
(``RESYNC_TICK_SECONDS``), which must be the PingSource's period, or some shares are never taken
(``tests/deploy/test_manifests.py`` checks this repository's). A tick re-delivered later keeps its
share, since the broker keeps its event's time.
"""

from __future__ import annotations

import hashlib
from datetime import datetime


def share(uid: str, passes: int) -> int:
    """The pass, of ``passes``, whose ticks look at this Tenant closely."""
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:8], "big") % passes


def tick_share(tick: datetime, tick_seconds: int, passes: int) -> int:
    """The share a tick at ``tick`` looks at: its number since the epoch, modulo ``passes``."""
    return int(tick.timestamp() // tick_seconds) % passes


def closely(uid: str, tick: datetime, tick_seconds: int, passes: int) -> bool:
    """Whether the pass of the tick at ``tick`` looks at the Tenant ``uid`` closely."""
    return passes == 1 or share(uid, passes) == tick_share(tick, tick_seconds, passes)
