"""vcluster-watch: hears every vCluster's StatefulSet change and tells check-ready at once.

check-ready polls a booting vCluster every 15 s (the broker's delayed re-delivery); this process
makes readiness come within a second of the control plane's pod: one LIST and then one WATCH,
over all namespaces, of the StatefulSets install's values label with their Tenant
(``shared.model.vcluster_watch.SELECTOR``). For each change that may move what check-ready's
look finds (rolled out, pods ready: ``worth_a_look``) it sends ``io.kubeopera.tenant.vcluster.changed`` for the Tenant
the owner labels name to the Broker (``K_SINK``, from ``eventing/vcluster-watch-sinkbinding.yaml``),
and the Trigger ``tenant-check-ready-hint`` takes it to check-ready, which looks once.

It replaces Knative's ApiServerSource for this (``vcluster-source`` until 2026-12-06). That
source watched a namespace at a time, over a list of namespaces Knative's controller kept in the
adapter's environment: every new Tenant restarted the adapter, cost three SubjectAccessReviews
per Tenant namespace, and from about 3,000 Tenants the list no longer fit one environment string
(``python -m bench sources``; docs/design-notes.md). One cluster-wide watch costs the same
whatever the fleet: a LIST at start, a WATCH request every ``WATCH_SECONDS``, and a LIST again
only when the API server expired the watch (410), after which the changes missed meanwhile are
sent (``relisted``). What it keeps is one ``Seen`` per vCluster (names and five numbers).

A hint only: losing one changes nothing but how soon Ready comes (the poll stays, and resync).
So a change is sent once, and one the broker does not take is counted and dropped, never
retried past ``shared.delivery.sink``'s brief retries; the hints of the ``BROKER_PAUSE_SECONDS``
after it are dropped untried: a watch that waited on a broker would fall behind every Tenant.
The first LIST sends nothing (as Knative's source did not): a change from before the process
started is the poll's.

It is a Knative Service of one pod (``deploy/base/services/tenant-vcluster-watch.yaml``, min and
max scale 1) that takes no events: its port serves ``/readyz`` (once the first LIST is in),
``/healthz`` (while the watch's thread runs and makes progress: a LIST, a change or a WATCH ended
within ``STALL_SECONDS``; any error is retried with a growing wait, and one that never heals, or a
request that hangs, fails the probe, and the kubelet restarts the pod) and ``/metrics``. During
a rollout the old and new pods both watch for a few seconds: a change may be sent twice, and
check-ready looks twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from flask import Flask

from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import TemporaryError, WatchExpired
from shared.model import event_types
from shared.model.vcluster_watch import SELECTOR, Change, Key, Seen, relisted, tenant_of, worth_a_look
from shared.observability import metrics
from shared.runtime import EventSender, Runtime

NAME = "vcluster-watch"
log = logging.getLogger(__name__)

# Each WATCH request asks the API server to end it after this long (the API server may end it
# sooner); the next one starts from the last version heard, with no LIST.
WATCH_SECONDS = 300
# After a failed LIST or WATCH, the longest wait before the next (the error's own retry_after
# first, doubling while failures repeat).
MOST_BACKOFF_SECONDS = 30
# No LIST, change or WATCH's end for this long is a watch that stalled (/healthz fails): twice what
# a WATCH may last, which leaves the adapter's read timeout after the API server's end (30 s) and
# the longest backoff between two requests to spare.
STALL_SECONDS = 2 * WATCH_SECONDS
# After a hint the broker did not take, the hints of the next seconds are dropped without trying:
# a broker that hangs would otherwise hold the watch for a send's timeout per change.
BROKER_PAUSE_SECONDS = 5.0


class WatchKube(Protocol):
    """The adapter's calls the watch makes (``shared.adapters.kube.Kube``)."""

    def list_seen(self, label_selector: str) -> tuple[dict[Key, Seen], str]: ...
    def watch_seen(self, label_selector: str, resource_version: str, timeout_seconds: int) -> Iterator[Change]: ...


class Watch:
    """The LIST, the WATCH after it, and the hints; ``run`` until ``stop`` is set."""

    def __init__(
        self,
        kube: WatchKube,
        sink: Callable[[], EventSender],
        namespace: str | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._sink = sink  # asked until it gives a sender (none while K_SINK is unset), then kept
        self._sender: EventSender | None = None
        self._namespace = namespace
        self._clock = clock
        self._progress = clock()  # the last LIST, change or WATCH's end
        self._broker_paused_until = 0.0
        self._known: dict[Key, Seen] = {}
        self._version = ""  # "" : list (again) before the next watch
        self._listed = threading.Event()

    def ready(self) -> bool:
        """The first LIST is in: from now on every change is heard."""
        return self._listed.is_set()

    def progressing(self) -> bool:
        """A LIST, a change or a WATCH's end within ``STALL_SECONDS``: not hung, not failing on end."""
        return self._clock() - self._progress < STALL_SECONDS

    def run(self, stop: threading.Event) -> None:
        """LIST, then WATCH from the list's version, again and again, until ``stop``. Every error
        is retried after a wait that doubles with each failure in a row (``MOST_BACKOFF_SECONDS``
        at most): an expired watch (410) lists again at once the first time; a WATCH that ends
        with nothing in it waits a second before the next, so an API server or proxy that closes
        watches at once is not asked again in a tight loop, and ends the run of failures only if
        it lasted ``MOST_BACKOFF_SECONDS`` or more (a proxy that fails a WATCH, then closes the
        next at once, again and again, still meets a growing wait)."""
        failures = 0  # in a row: a change or a WATCH that ran a while resets it, a LIST does not
        while not stop.is_set():
            wait = 0.0
            try:
                if not self._version:
                    self._list()
                heard = 0
                began = self._clock()
                for change in self._kube.watch_seen(SELECTOR, self._version, WATCH_SECONDS):
                    self._take(change)
                    heard += 1
                    failures = 0
                    if stop.is_set():
                        return
                self._progress = self._clock()
                if self._progress - began >= MOST_BACKOFF_SECONDS:
                    failures = 0  # a quiet WATCH the API server ended in its time: the watch works
                wait = 0.0 if heard else 1.0
            except Exception as err:  # a bug too: /healthz fails if failures last (``progressing``)
                failures += 1
                wait = self._after(err, failures)
            if wait and not stop.is_set():
                stop.wait(wait)

    def _after(self, err: Exception, failures: int) -> float:
        """The wait after ``err``, the ``failures``-th in a row, logged: an expired version lists
        again (at once the first time: a LIST that succeeds between two 410s does not reset the
        count, so repeated expiries back off); a temporary error waits its own ``retry_after``
        first; anything else is logged with its traceback."""
        if isinstance(err, WatchExpired):
            self._version = ""
            wait = 0.0 if failures == 1 else _backoff(failures - 1, 1)
            log.info("the watch expired; listing again", extra={"error": str(err), "wait_seconds": wait})
        elif isinstance(err, TemporaryError):
            wait = _backoff(failures, err.retry_after or 1)
            log.warning("watching failed; trying again", extra={"error": str(err), "wait_seconds": wait})
        else:
            wait = _backoff(failures, 1)
            log.exception("watching failed unexpectedly; trying again", extra={"wait_seconds": wait})
        return wait

    def _list(self) -> None:
        listed, version = self._kube.list_seen(SELECTOR)
        metrics.VCLUSTER_WATCH_LISTS.inc()
        if self._listed.is_set():  # a re-list: what changed while no watch was open
            for seen in list(relisted(self._known, listed)):
                self._hint(seen)
        self._known, self._version = listed, version
        self._progress = self._clock()
        if not self._listed.is_set():
            log.info("watching the vClusters' StatefulSets", extra={"vclusters": len(listed), "version": version})
            self._listed.set()

    def _take(self, change: Change) -> None:
        self._version = change.resource_version or self._version
        self._progress = self._clock()
        seen = change.seen
        if seen is None:  # a bookmark: only the version moves
            return
        before = self._known.get(seen.key)
        after = None if change.kind == "DELETED" else seen
        if after is None:
            self._known.pop(seen.key, None)
        else:
            self._known[seen.key] = after
        if worth_a_look(before, after):
            self._hint(seen)

    def _hint(self, seen: Seen) -> None:
        ref = tenant_of(seen, self._namespace)
        if ref is None:
            log.debug("a StatefulSet naming no Tenant served here", extra={"statefulset": "/".join(seen.key)})
            metrics.VCLUSTER_HINTS.labels("ignored").inc()
            return
        if self._clock() < self._broker_paused_until:  # a hint: the poll covers it
            metrics.VCLUSTER_HINTS.labels("failed").inc()
            return
        try:
            if self._sender is None:
                self._sender = self._sink()
            self._sender.send(events.make(event_types.VCLUSTER_CHANGED, NAME, ref))
        except TemporaryError as err:
            log.warning(
                "a hint was lost; the hints of the next seconds are dropped untried",
                extra={"tenant": ref.key, "error": str(err), "pause_seconds": BROKER_PAUSE_SECONDS},
            )
            metrics.VCLUSTER_HINTS.labels("failed").inc()
            self._broker_paused_until = self._clock() + BROKER_PAUSE_SECONDS
            return
        log.debug("check-ready told", extra={"tenant": ref.key, "statefulset": "/".join(seen.key)})
        metrics.VCLUSTER_HINTS.labels("sent").inc()


def _backoff(failures: int, first: float) -> float:
    """``first``, doubled for each failure in a row after the first, ``MOST_BACKOFF_SECONDS`` at most."""
    return float(min(MOST_BACKOFF_SECONDS, first * 2 ** (failures - 1)))


def start(watch: Watch) -> tuple[threading.Thread, threading.Event]:
    """Run ``watch`` on a daemon thread. ``run`` retries every error itself; should the thread end
    anyway, that is logged and ``/healthz`` says so."""
    stop = threading.Event()

    def loop() -> None:
        try:
            watch.run(stop)
        except BaseException:  # the thread ends here; /healthz says so and the kubelet restarts the pod
            log.exception("the vCluster watch stopped")

    thread = threading.Thread(target=loop, name=NAME, daemon=True)
    thread.start()
    return thread, stop


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME, deliveries=False)
    for outcome in ("sent", "failed", "ignored"):
        metrics.VCLUSTER_HINTS.labels(outcome)
    watch = Watch(rt.kube, rt.sink_client, rt.settings.tenant_namespace)
    thread, _ = start(watch)
    return function_app(
        Step(
            name=NAME,
            accepts=frozenset(),
            ready=watch.ready,
            alive=lambda: thread.is_alive() and watch.progressing(),
        )
    )
