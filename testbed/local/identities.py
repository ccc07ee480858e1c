"""A kubeconfig per ServiceAccount, as a pod's projected token gives it its identity."""

from __future__ import annotations

from pathlib import Path

from testbed import controlplane as cp_mod


class Identities:
    """A kubeconfig per ServiceAccount, with a token from the TokenRequest API (a pod's projected token)."""

    def __init__(self, control_plane: cp_mod.ControlPlane, folder: Path) -> None:
        self._cp = control_plane
        self._folder = folder
        self._made: dict[tuple[str, str], Path] = {}

    def kubeconfig(self, namespace: str, account: str) -> Path:
        if (namespace, account) not in self._made:
            self._folder.mkdir(parents=True, exist_ok=True)
            token = cp_mod.request_token(self._cp, namespace, account, duration="24h")
            self._made[(namespace, account)] = cp_mod.kubeconfig_for_token(
                self._cp,
                token,
                self._folder / f"{namespace}.{account}.kubeconfig",
                user=f"system:serviceaccount:{namespace}:{account}",
            )
        return self._made[(namespace, account)]
