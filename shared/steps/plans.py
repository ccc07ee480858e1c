"""The values install hands helm for a Tenant under its plan, and the plans' check at start.

``release_values`` is the one place the values of a release are made: ``shared.model.values``
for the Tenant with the settings, under the plan its ``spec.plan`` names (``shared.model.plans``;
an unknown plan is ``UnknownPlan``, permanent: the Tenant is Failed with the list of plans).

``PlanCheck`` checks every plan against the pinned chart's own ``values.schema.json``, each plan's
values as install would send them for a sample Tenant (the Tenant's fields cannot fail the schema:
the CRD bounds them, and tests/unit/test_values_schema.py checks what install computes). The
schema is in the chart, which install pulls at its readiness (a registry may still be out of reach
when the process starts, and gunicorn gives a worker's start no more than its timeout); so the
check runs at install's first readiness that has the chart, and a plan that fails it keeps
install from ever being ready: its pod takes no delivery (Knative keeps the previous revision
serving), and the log says which plan and which key, once. The plans' own rules (YAML, protected
keys) are checked earlier still, when the settings are read (``ConfigError``: the process exits).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from shared.adapters import values_schema
from shared.errors import ConfigError, TenantError
from shared.model.plans import Plan
from shared.model.tenant import Quota, Tenant, TenantSpec
from shared.settings import Settings

log = logging.getLogger(__name__)

# A Tenant as the CRD admits one, for the plans' check (its names are the longest the CRD allows).
SAMPLE = Tenant(
    namespace="kubeopera-system",
    name="plan-check",
    uid="00000000-0000-4000-8000-000000000000",
    generation=1,
    resource_version="1",
    spec=TenantSpec(
        user_id="00000000-0000-4000-8000-000000000000",
        tenant_name="plan-check-" + "x" * 21,
        cloud_space_id="00000000-0000-4000-8000-000000000000",
        quota=Quota("1", "1Gi"),
    ),
)


def release_values(tenant: Tenant, settings: Settings, plan: Plan | None = None) -> dict[str, Any]:
    """The values of ``tenant``'s release: its plan's (``plan``, or the one its spec names) under
    what install computes for it with ``settings``."""
    chosen = plan if plan is not None else settings.plans.get(tenant.spec.plan)
    return chosen.release_values(
        tenant,
        settings.environment,
        settings.isolation,
        settings.service_cidr,
        settings.distro,
        settings.external_server,
    )


def check(settings: Settings, schema: Mapping[str, Any] | None) -> None:
    """Every plan's values for the sample Tenant against ``schema`` (None: the chart has none, so
    nothing to check); a ``ConfigError`` naming each plan that fails, with the keys and why."""
    if schema is None:
        return
    refused = []
    for plan in settings.plans.plans:
        found = values_schema.problems(schema, release_values(SAMPLE, settings, plan))
        if found:
            refused.append(f"plan {plan.name}: " + "; ".join(found))
    if refused:
        raise ConfigError(
            "the chart's values.schema.json refuses " + " | ".join(refused) + " (fix the ConfigMap tenant-plans)"
        )


class ChartSource(Protocol):
    """What the check asks of helm (``shared.adapters.helm.Helm``)."""

    def values_schema(self) -> Mapping[str, Any] | None: ...


class PlanCheck:
    """The plans' check against the chart, as install's readiness: not ready until the chart is at
    hand and every plan passes its schema, and never ready once a plan has failed it."""

    def __init__(self, settings: Settings, chart: ChartSource) -> None:
        self._settings = settings
        self._chart = chart
        self._lock = threading.Lock()
        self._passed = False
        self.refusal = ""  # why the plans were refused (the ConfigError's message), once they were

    def ready(self) -> bool:
        with self._lock:
            if self._passed or self.refusal:
                return self._passed
            try:
                schema = self._chart.values_schema()
            except TenantError:
                log.exception("chart not available yet")
                return False
            try:
                check(self._settings, schema)
            except ConfigError as err:
                self.refusal = str(err)
                log.error("install does not start: a plan fails the chart's schema", extra={"error": self.refusal})
                return False
            self._passed = True
            return True
