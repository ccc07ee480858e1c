"""Talking to the test bed's API server the way this package does: through ``kubectl`` only
(:func:`kubectl`, as admin unless told otherwise, and :func:`apply`). The ``kubernetes`` client
is for ``shared.adapters.kube`` and the tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane.model import ControlPlane
from testbed.processes import run, until_conditions_exist


def kubectl(
    cp: ControlPlane,
    *args: str,
    input: str | None = None,
    timeout: float = 60.0,
    check: bool = True,
    kubeconfig: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run kubectl against the control plane (as admin unless ``kubeconfig`` is given)."""
    config = kubeconfig or cp.admin_kubeconfig
    return run(
        [str(cp.kubectl), f"--kubeconfig={config}", *args],
        env={"KUBECONFIG": str(config)},
        input=input,
        timeout=timeout,
        check=check,
    )


def wait_established(cp: ControlPlane, *crds: str, timeout: float = 60.0) -> None:
    """Until each CustomResourceDefinition (``crd/NAME``) is Established: ``kubectl wait``, again
    while one just created has no conditions yet (kubectl gives up on those at once)."""
    until_conditions_exist(
        lambda: kubectl(
            cp, "wait", "--for=condition=Established", f"--timeout={timeout:.0f}s", *crds, timeout=timeout + 30
        ),
        timeout,
    )


def as_service_account(namespace: str, name: str) -> list[str]:
    """kubectl's flags to act as ServiceAccount ``namespace/name``, with the groups the API server
    gives its tokens (impersonation: the same authorization and admission as its own token)."""
    return [
        f"--as=system:serviceaccount:{namespace}:{name}",
        "--as-group=system:serviceaccounts",
        f"--as-group=system:serviceaccounts:{namespace}",
        "--as-group=system:authenticated",
    ]


def as_syncer(tenant_name: str) -> list[str]:
    """kubectl's flags to act as a tenant's vCluster syncer (``vc-vc-<t>`` in ``vcluster-<t>``):
    what it may write in its host namespace, the tenant can cause from inside its vCluster."""
    return as_service_account(f"vcluster-{tenant_name}", f"vc-vc-{tenant_name}")


def apply(cp: ControlPlane, manifest: str | dict[str, Any] | list[dict[str, Any]]) -> None:
    """``kubectl apply -f -`` a YAML string or object(s), as admin."""
    if isinstance(manifest, str):
        text = manifest
    elif isinstance(manifest, list):
        text = yaml.safe_dump_all(manifest)
    else:
        text = yaml.safe_dump(manifest)
    kubectl(cp, "apply", "-f", "-", input=text)
