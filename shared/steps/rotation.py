"""Re-issuing a vCluster's certificates: what ``kubeopera-tenants rotate`` does, and when it is done.

vcluster 0.21.2 makes its CA, and the ``system:masters`` client certificate it exports, at its
first boot (both valid 10 years) and keeps them in Secret ``<release>-certs`` of its namespace:
its certificate folder is an emptyDir, so that Secret is the only copy. It has no command to
re-issue them. A boot that finds no such Secret makes new ones. So a rotation is, in this order:

1. delete Secret ``vc-<t>-certs`` in ``vcluster-<t>`` (the running pod keeps serving with what it
   booted with);
2. restart the vCluster's StatefulSet as ``kubectl rollout restart`` does: a new generation, whose
   pod finds no certificates, makes a new CA and client certificate, and exports a new kubeconfig
   in ``vc-vc-<t>``. Every credential of the old CA is refused from then on;
3. patch the Tenant to Pending. The router sends it to install, whose upgrade with the same values
   changes nothing; check-ready waits for the restarted generation and proves the new kubeconfig
   against the vCluster's API; store-kubeconfig stores it; notify-api tells kubeopera-api; the
   Tenant is Ready again. Until then it is not Ready: its old credentials no longer work.

The order matters. Were the Tenant Pending before the restart, check-ready could find the old pod
ready and hand over the old kubeconfig once more. Run again after a failure, the command starts
over (one more new CA), so it is safe to repeat.

:func:`progress` judges, from the Tenant and its stored kubeconfig read after step 3, whether the
rotation is done, still under way, or failed; :func:`rotate` runs the steps and waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from shared.adapters.vcluster_api import UnusableKubeconfig, read_kubeconfig
from shared.errors import Conflict
from shared.model.cluster import StoredSecret
from shared.model.naming import KUBECONFIG_KEY
from shared.model.tenant import COND_CALLBACK, Phase, StatusUpdate, Tenant, rfc3339, utcnow
from shared.steps.certificates import client_certificate_expiry


class RotationKube(Protocol):
    """What a rotation needs of the Kubernetes adapter (``shared.adapters.kube.Kube``)."""

    def get_tenant(self, namespace: str, name: str) -> Tenant | None: ...
    def patch_tenant_status(self, tenant: Tenant, update: StatusUpdate) -> Tenant: ...
    def restart_rollout(self, namespace: str, name: str, at: str) -> int | None: ...
    def get_secret(self, namespace: str, name: str) -> StoredSecret | None: ...
    def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None: ...
    def delete_secret(self, namespace: str, name: str, resource_version: str) -> None: ...

POLL_SECONDS = 2.0


class RotationError(Exception):
    """The rotation cannot start, or ended without new credentials handed over; says why."""


def certs_secret(release: str) -> str:
    """Where vcluster 0.21.2 keeps its certificates (its ``CertSecretName``)."""
    return f"{release}-certs"


@dataclass(frozen=True)
class Progress:
    """What the Tenant shows of a rotation: ``done``, or ``failed`` (why), or neither (under way)."""

    done: bool = False
    failed: str = ""
    waiting_for: str = ""


def client_certificate(kubeconfig: bytes | None) -> bytes | None:
    """The client certificate (PEM) of a kubeconfig; None when there is none to read."""
    if kubeconfig is None:
        return None
    try:
        return read_kubeconfig(kubeconfig).cert_pem
    except UnusableKubeconfig:
        return None


def refusal(tenant: Tenant | None, ref: str) -> str | None:
    """Why this Tenant cannot be rotated now, or None. Only a Ready Tenant is: one on its way
    gets new credentials anyway, a Failed one waits for ``retry``, a deleted one for nothing."""
    if tenant is None:
        return f"tenant {ref} not found"
    if tenant.deleting:
        return f"tenant {ref} is being deleted"
    if tenant.status.phase != Phase.READY:
        phase = tenant.status.phase.value
        return f"tenant {ref} is {phase}, not Ready; only a Ready tenant's certificates are rotated"
    return None


def progress(tenant: Tenant | None, stored: bytes | None, old_certificate: bytes | None) -> Progress:
    """Judge a rotation from the Tenant and its stored kubeconfig, both read after it was requested
    (so a Ready Tenant was made Ready again by the pipeline, not left so from before)."""
    if tenant is None:
        return Progress(failed="the tenant was deleted")
    if tenant.status.phase == Phase.FAILED:
        return Progress(failed=f"the tenant is Failed: {tenant.status.message}")
    if tenant.status.phase != Phase.READY:
        phase = tenant.status.phase.value
        return Progress(waiting_for=f"the tenant to be Ready again (it is {phase}: {tenant.status.message})")
    certificate = client_certificate(stored)
    if certificate is None:
        return Progress(waiting_for="the new kubeconfig to be stored")
    if certificate == old_certificate:
        return Progress(
            failed="the tenant is Ready again with the old client certificate: the vCluster did not re-issue it"
        )
    callback = tenant.status.condition(COND_CALLBACK)
    if not tenant.status.is_true(COND_CALLBACK, tenant.generation):
        said = callback.message if callback else "no answer yet"
        return Progress(waiting_for=f"kubeopera-api to take the announcement ({said}); resync sends it again")
    return Progress(done=True)


def request_update(requested_at: str) -> StatusUpdate:
    """Step 3: Pending, with a message that says why (the router sends a Pending Tenant to install)."""
    return StatusUpdate(
        phase=Phase.PENDING,
        fields={"message": f"certificate rotation requested at {requested_at}; the vCluster restarts with new ones"},
    )


def rotate(
    kube: RotationKube,
    namespace: str,
    name: str,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Run the three steps for Tenant ``namespace/name`` and wait up to ``timeout`` seconds until
    its new kubeconfig is stored and announced; return what was done, raise ``RotationError``."""
    ref = f"{namespace}/{name}"
    tenant = kube.get_tenant(namespace, name)
    why = refusal(tenant, ref)
    if why is not None or tenant is None:
        raise RotationError(why or f"tenant {ref} not found")
    names = tenant.spec.names
    old = client_certificate(kube.read_secret_key(namespace, names.kubeconfig_secret, KUBECONFIG_KEY))
    requested_at = rfc3339(utcnow())

    certs = kube.get_secret(names.namespace, certs_secret(names.release))
    if certs is not None:
        kube.delete_secret(names.namespace, certs_secret(names.release), certs.resource_version)
    if kube.restart_rollout(names.namespace, names.release, requested_at) is None:
        raise RotationError(f"tenant {ref} has no StatefulSet {names.namespace}/{names.release} to restart")
    _request(kube, namespace, name, requested_at)

    deadline = clock() + timeout
    while True:
        tenant = kube.get_tenant(namespace, name)
        stored = kube.read_secret_key(namespace, names.kubeconfig_secret, KUBECONFIG_KEY)
        seen = progress(tenant, stored, old)
        if seen.failed:
            raise RotationError(f"tenant {ref}: rotation requested at {requested_at} failed: {seen.failed}")
        if seen.done:
            expiry = client_certificate_expiry(stored or b"")
            until = f" (valid until {rfc3339(expiry)})" if expiry else ""
            return (
                f"tenant {ref}: new certificates issued{until}, kubeconfig stored in Secret "
                f"{namespace}/{names.kubeconfig_secret}, kubeopera-api told"
            )
        if clock() > deadline:
            raise RotationError(
                f"tenant {ref}: not done {timeout:.0f}s after {requested_at}; waiting for {seen.waiting_for}"
            )
        sleep(POLL_SECONDS)


def _request(kube: RotationKube, namespace: str, name: str, requested_at: str) -> None:
    for _ in range(3):
        tenant = kube.get_tenant(namespace, name)
        if tenant is None:
            raise RotationError(f"tenant {namespace}/{name} was deleted")
        try:
            kube.patch_tenant_status(tenant, request_update(requested_at))
        except Conflict:
            continue
        return
    raise RotationError(f"tenant {namespace}/{name} kept changing; run rotate again")
