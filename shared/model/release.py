"""A helm release as a value, and what to do with one: decided once, from what was read.

``ReleaseState`` is what both readers of a release give (``shared.adapters.helm`` from the helm
CLI, ``shared.adapters.release.ReleaseRecords`` from helm's own record). :func:`plan` is the one
decision install's helm step makes before it acts, in the manner of Flux's helm-controller: from
the release as read (absent; deployed with the pinned chart and the same values; differing; pending
and young; pending and stuck) it says which single action comes next. Ownership (a release that is
another Tenant's, or whose history was tampered with) is decided before, by the guard of
``shared.steps.claims``, and refuses the delivery; it never reaches a plan.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

DEPLOYED: Final = "deployed"
FAILED: Final = "failed"
PENDING_STATES: Final = frozenset({"pending-install", "pending-upgrade", "pending-rollback", "uninstalling"})


@dataclass(frozen=True)
class ReleaseState:
    name: str
    namespace: str
    revision: int
    status: str
    chart_version: str
    updated: datetime | None = None

    @property
    def deployed(self) -> bool:
        return self.status == DEPLOYED

    @property
    def pending(self) -> bool:
        return self.status in PENDING_STATES


class Action(enum.Enum):
    """The next thing to do with a release, one at a time."""

    INSTALL = "install"  # there is no release
    UPGRADE = "upgrade"  # it runs other values or another chart, failed, or a re-apply was asked
    NOTHING = "in sync"  # deployed, with the pinned chart and the same values
    WAIT = "busy"  # pending and young: another helm operation may still be running
    UNINSTALL_STUCK = "uninstall stuck"  # a pending install whose helm died: uninstall, then install
    ROLL_BACK_STUCK = "roll back stuck"  # a pending upgrade or rollback whose helm died: roll back, then upgrade


def stuck_verdict(state: ReleaseState, now: datetime, stuck_after: float) -> Action | None:
    """How to recover a pending release, None if it is not stuck (not pending, or younger than
    ``stuck_after``: another operation may still be running)."""
    if not state.pending:
        return None
    if state.updated is not None and (now - state.updated).total_seconds() < stuck_after:
        return None
    return Action.UNINSTALL_STUCK if state.status in ("pending-install", "uninstalling") else Action.ROLL_BACK_STUCK


def same_values(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def plan(
    current: ReleaseState | None,
    current_values: Mapping[str, Any] | None,
    current_chart: str | None,
    wanted_values: Mapping[str, Any],
    pinned_chart: str,
    now: datetime,
    stuck_after: float,
    reapply: bool = False,
) -> Action:
    """The next action for a release read as ``current`` (None: absent) with ``current_values``.

    ``current_chart`` is the chart version it runs; it decides only for a deployed release with the
    wanted values, so a reader may leave it None otherwise (``chart_matters``). ``reapply``: upgrade
    even if nothing differs (helm then makes again what was deleted)."""
    if current is None:
        return Action.INSTALL
    if current.pending:
        return stuck_verdict(current, now, stuck_after) or Action.WAIT
    if reapply or not chart_matters(current, current_values, wanted_values):
        return Action.UPGRADE
    return Action.NOTHING if current_chart == pinned_chart else Action.UPGRADE


def chart_matters(
    current: ReleaseState | None, current_values: Mapping[str, Any] | None, wanted_values: Mapping[str, Any]
) -> bool:
    """Whether :func:`plan` needs the chart version the release runs: it is deployed, with the
    wanted values (so only the chart can still differ)."""
    return (
        current is not None
        and current.deployed
        and current_values is not None
        and same_values(current_values, wanted_values)
    )
