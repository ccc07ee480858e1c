"""One helm operation per release across every process: a Lease in the release namespace.

install scales to several pods, and the broker may deliver the same Tenant's events to two of
them at once; helm's own pending states would refuse the second operation only after it started
(and a refused upgrade is still a failed helm run). ``release_lease`` holds a
``coordination.k8s.io/v1`` Lease named ``<release>-helm`` in the release namespace for the
length of one helm operation: the first holder works, any other answers "another operation in
progress" (temporary: the broker re-delivers). The Lease lasts ``LEASE_SECONDS`` and a thread
renews it every ``RENEW_SECONDS`` while the operation runs, however long helm takes (helm itself
is stopped at ``HELM_DEADLINE_SECONDS``, ``shared.helm``); a holder that died (a killed pod) stops
counting ``LEASE_SECONDS`` after its last renewal. Threads of one process queue on a thread lock
first, so only deliveries on different processes are sent back.

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

from shared.errors import TenantError, WorkInHand
from shared.kube import Kube

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


_installing: dict[str, list[int]] = {}  # release -> the generations threads of this process install


@contextmanager
def installing(namespace: str, release: str, generation: int) -> Iterator[bool]:
    """True (and, until the block ends, registered) when no other thread of this process is
    installing ``release`` at ``generation`` or a newer one; False when one is."""
    key = f"{namespace}/{release}"
    with _local_guard:
        running = _installing.setdefault(key, [])
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
            running = _installing[key]
            running.remove(generation)
            if not running:
                del _installing[key]


@contextmanager
def release_lease(kube: Kube, namespace: str, release: str) -> Iterator[None]:
    """Threads of one process wait for each other (a thread lock); other processes are told
    to come back later (the Lease, renewed for as long as the block runs)."""
    with _thread_lock(f"{namespace}/{release}"), _lease(kube, namespace, release):
        yield


@contextmanager
def _lease(kube: Kube, namespace: str, release: str) -> Iterator[None]:
    name = f"{release}-helm"
    holder = holder_identity()
    hold = kube.acquire_lease(namespace, name, holder, LEASE_SECONDS)
    if hold is None:
        raise WorkInHand(
            f"another process is running helm on release {namespace}/{release} (Lease {name})", retry_after=5
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
            log.warning("could not give the release Lease up", extra={"lease": name, "error": str(err)})


class _Renewal(threading.Thread):
    """Renews one held Lease every ``RENEW_SECONDS`` until stopped; ``stop`` returns the last hold."""

    def __init__(self, kube: Kube, namespace: str, name: str, holder: str, hold: str) -> None:
        super().__init__(name=f"lease-{name}", daemon=True)
        self._kube, self._namespace, self._name, self._holder = kube, namespace, name, holder
        self.hold = hold
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(RENEW_SECONDS):
            try:
                renewed = self._kube.acquire_lease(self._namespace, self._name, self._holder, LEASE_SECONDS)
            except TenantError as err:  # the next try may pass; the Lease lasts three of these
                log.warning("could not renew the release Lease", extra={"lease": self._name, "error": str(err)})
                continue
            if renewed is None:  # it ran out meanwhile and another process took it: say so loudly
                log.error("the release Lease was taken over while helm ran", extra={"lease": self._name})
                return
            self.hold = renewed

    def stop(self) -> str:
        self._done.set()
        self.join()
        return self.hold
