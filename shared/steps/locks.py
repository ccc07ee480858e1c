"""One install or cleanup at a time per Tenant namespace, across every process: a Lease.

install scales to several pods, cleanup too, and the broker may deliver events of one Tenant to
two of them at once: two helm operations on one release, or (issue 26 item 4) a cleanup that finds
no namespace yet and lets the Tenant go while an install that read the Tenant a moment before goes
on to create the namespace, which then belongs to nobody. ``work_lock`` holds a
``coordination.k8s.io/v1`` Lease named ``lock-vcluster-<tenantName>`` (``TenantNames.work_lock``)
in the Tenants' namespace while install makes, or cleanup removes, anything of
``vcluster-<tenantName>``: the first holder works, any other answers "work in hand" (temporary: the
broker re-delivers), and the holder decides on the Tenant as it reads it under the Lease (install
leaves a Tenant being deleted to cleanup). In the Tenants' namespace, not in ``vcluster-<t>``:
the lock exists before that namespace does, and what a tenant can write there cannot hold it.
Keyed by tenantName, not by Tenant, because that is what names the namespace and the release:
a Tenant deleted and made again under its name waits for the old one's cleanup.

The Lease lasts ``LEASE_SECONDS`` and a thread renews it every ``RENEW_SECONDS`` while the work
runs, however long helm takes (helm itself is stopped at ``HELM_DEADLINE_SECONDS``,
``shared.adapters.helm``); a holder that died (a killed pod) stops counting ``LEASE_SECONDS`` after its last
renewal. Threads of one process queue on a thread lock first, so only deliveries on different
processes are sent back.

Before any of that, ``installing`` coalesces within one process: the ApiServerSource sends a
Tenant's own status and finalizer writes back to install as updates, so a burst brings several
deliveries of one Tenant at once. While a thread installs a release at a generation, another
delivery of that release at the same or an older generation has nothing to add and is answered
at once instead of holding a thread until the first is done. That is safe because the first
delivery's outcome covers it: success moves the Tenant on; a temporary error is re-delivered by
the broker; a permanent one fails the Tenant; a killed process leaves the first delivery
unanswered, and the broker re-delivers that one.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from shared.errors import TenantError, WorkInHand
from shared.model.naming import TenantNames


class Leases(Protocol):
    """What the work lock needs of the Kubernetes adapter (``shared.adapters.kube.Kube``)."""

    def acquire_lease(self, namespace: str, name: str, holder: str, seconds: int) -> str | None: ...
    def release_lease(self, namespace: str, name: str, resource_version: str) -> None: ...

log = logging.getLogger(__name__)

LEASE_SECONDS = 30  # a holder that stops renewing frees the release this long after its last renewal
RENEW_SECONDS = 10.0  # how often a live holder renews: three chances before the Lease runs out


def holder_identity() -> str:
    """This thread of this process of this pod."""
    return f"{socket.gethostname()}/{os.getpid()}/{threading.get_ident()}"


_local: dict[str, threading.Lock] = {}
_local_guard = threading.Lock()


def _thread_lock(key: str) -> threading.Lock:
    with _local_guard:
        return _local.setdefault(key, threading.Lock())


_installing: dict[str, list[int]] = {}  # Tenant uid -> the generations threads of this process install


@contextmanager
def installing(uid: str, generation: int) -> Iterator[bool]:
    """True (and, until the block ends, registered) when no other thread of this process is
    installing the Tenant ``uid`` at ``generation`` or a newer one; False when one is. Keyed by the
    Tenant, not its release: another Tenant naming the same ``tenantName`` is not a duplicate of
    this one's delivery, and must go on to the work lock and the rival check that fail it."""
    with _local_guard:
        running = _installing.setdefault(uid, [])
        mine = all(other < generation for other in running)
        if mine:
            running.append(generation)
    if not mine:
        yield False
        return
    try:
        yield True
    finally:
        with _local_guard:
            running = _installing[uid]
            running.remove(generation)
            if not running:
                del _installing[uid]


@contextmanager
def work_lock(kube: Leases, namespace: str, names: TenantNames) -> Iterator[None]:
    """The work on ``names.namespace``, from the Tenants' ``namespace``: threads of one process wait
    for each other (a thread lock); other processes are told to come back later (the Lease,
    renewed for as long as the block runs)."""
    with _thread_lock(f"{namespace}/{names.work_lock}"), _lease(kube, namespace, names):
        yield


@contextmanager
def _lease(kube: Leases, namespace: str, names: TenantNames) -> Iterator[None]:
    name = names.work_lock
    holder = holder_identity()
    hold = kube.acquire_lease(namespace, name, holder, LEASE_SECONDS)
    if hold is None:
        raise WorkInHand(
            f"another process is installing or removing {names.namespace} (Lease {namespace}/{name})", retry_after=5
        )
    renewal = _Renewal(kube, namespace, name, holder, hold)
    renewal.start()
    try:
        yield
    finally:
        hold = renewal.stop()
        try:
            kube.release_lease(namespace, name, hold)
        except TenantError as err:  # it expires on its own; the operation's outcome matters more
            log.warning("could not give the work Lease up", extra={"lease": name, "error": str(err)})


class _Renewal(threading.Thread):
    """Renews one held Lease every ``RENEW_SECONDS`` until stopped; ``stop`` returns the last hold."""

    def __init__(self, kube: Leases, namespace: str, name: str, holder: str, hold: str) -> None:
        super().__init__(name=f"lease-{name}", daemon=True)
        self._kube, self._namespace, self._name, self._holder = kube, namespace, name, holder
        self.hold = hold
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(RENEW_SECONDS):
            try:
                renewed = self._kube.acquire_lease(self._namespace, self._name, self._holder, LEASE_SECONDS)
            except TenantError as err:  # the next try may pass; the Lease lasts three of these
                log.warning("could not renew the work Lease", extra={"lease": self._name, "error": str(err)})
                continue
            if renewed is None:  # it ran out meanwhile and another process took it: say so loudly
                log.error("the work Lease was taken over while the work ran", extra={"lease": self._name})
                return
            self.hold = renewed

    def stop(self) -> str:
        self._done.set()
        self.join()
        return self.hold
