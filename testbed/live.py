"""The live view both tiers' runners print (``kubeopera-tenants local``, with or without
``--cluster``): lines stamped with the seconds since start, and each Tenant's phase once per change.

The loop that reads the Tenants and says which phase changed is this one, for both tiers; each
runner adds what only it shows (the broker's deliveries and the Ready announcement locally, the
functions' pods on the cluster tier).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TextIO

from shared.adapters.kube import Kube
from shared.errors import TenantError
from shared.model.tenant import Tenant

# The example Tenant both runners create (as in the original operator's documentation).
EXAMPLE = ("deploy", "examples", "alice-default.yaml")


@dataclass
class LiveView:
    """What has been shown already, so that each change is printed once."""

    out: TextIO
    started: float = field(default_factory=time.monotonic)
    phases: dict[str, str] = field(default_factory=dict)  # Tenant name -> the phase last shown
    first_seen: dict[str, float] = field(default_factory=dict)  # Tenant name -> monotonic time

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", file=self.out, flush=True)

    def tenants(self, kube: Kube, namespace: str) -> list[Tenant]:
        """The namespace's Tenants (those that parse), saying the phase of each that changed since."""
        tenants = []
        for obj in kube.list_tenant_objects(namespace):
            try:
                tenant = Tenant.from_object(obj)
            except TenantError:
                continue
            self.first_seen.setdefault(tenant.name, time.monotonic())
            phase = tenant.status.phase.value
            if self.phases.get(tenant.name) != phase:
                self.phases[tenant.name] = phase
                message = f": {tenant.status.message}" if tenant.status.message else ""
                self.say(f"{tenant.name}: phase {phase}{message}")
            tenants.append(tenant)
        return tenants

    def since_first_seen(self, tenant: Tenant) -> float:
        return time.monotonic() - self.first_seen.get(tenant.name, self.started)
