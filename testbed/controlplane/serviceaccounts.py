"""ServiceAccounts and their tokens: create one (no ServiceAccount controller runs, so nothing
else appears with it) and get a token for it from the TokenRequest API."""

from __future__ import annotations

from collections.abc import Sequence

from testbed.controlplane.client import kubectl
from testbed.controlplane.model import ControlPlane


def create_service_account(cp: ControlPlane, namespace: str, name: str) -> None:
    """Create a ServiceAccount (no ServiceAccount controller runs: nothing else appears with it)."""
    kubectl(cp, "create", "serviceaccount", name, "-n", namespace)


def request_token(
    cp: ControlPlane,
    namespace: str,
    service_account: str,
    *,
    duration: str = "1h",
    audiences: Sequence[str] = (),
) -> str:
    """A ServiceAccount token from the TokenRequest API (``kubectl create token``)."""
    args = ["create", "token", service_account, "-n", namespace, f"--duration={duration}"]
    args += [f"--audience={audience}" for audience in audiences]
    return kubectl(cp, *args).stdout.strip()
