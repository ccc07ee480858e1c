"""What Knative's broker delivered to the functions, read off the wire by the service proxy.

Every delivery Knative's ``mt-broker-filter`` makes to a Trigger's subscriber or dead-letter sink
crosses the service proxy (:mod:`testbed.standins.service_proxy`) on its way to the function's
process. :class:`BrokerWatch` turns those hops into :class:`Delivery` records (which Trigger,
which event, what the function answered) and answers the question the tests and the live view
ask: is the broker idle, nothing in flight and no retry still to come?

A retry is still to come when a Trigger's last attempt for an event was answered with a status
Knative retries (5xx, 404, 408, 409, 429; ``pkg/kncloudevents/retries.go``), fewer attempts than
``1 + delivery.retry`` were made, no dead-letter delivery for it followed, and the attempt was
started after the broker's data plane last restarted (the in-memory broker forgets the retries
it held, also those of a delivery still being answered when it was killed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from testbed.standins.service_proxy import Hop, ServiceProxy

RETRYABLE = frozenset({404, 408, 409, 429})
QUIET_SECONDS = 1.0  # between the ingress's 202 and the channel's fan-out, nothing is in flight


def retryable(status: int) -> bool:
    return status >= 500 or status in RETRYABLE


@dataclass(frozen=True)
class Route:
    """One Trigger as the broker sees it: its subscriber, its dead-letter sink, its retries."""

    trigger: str
    subscriber: str  # Knative Service name
    dead_letter: str | None
    retries: int
    types: frozenset[str] = frozenset()  # the event types its filters name exactly (none: any)

    @classmethod
    def from_trigger(cls, doc: Mapping[str, Any], broker_delivery: Mapping[str, Any]) -> Route:
        spec = doc["spec"]
        delivery = spec.get("delivery") or broker_delivery
        sink = (delivery.get("deadLetterSink") or {}).get("ref", {}).get("name")
        return cls(
            doc["metadata"]["name"],
            spec["subscriber"]["ref"]["name"],
            sink,
            int(delivery.get("retry", 0)),
            frozenset(_exact_types(spec.get("filters") or [])),
        )


def _exact_types(filters: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The ``type`` values of a Trigger's ``exact`` filters, inside ``any`` and ``all`` too."""
    for entry in filters:
        if "type" in entry.get("exact", {}):
            yield entry["exact"]["type"]
        for nested in ("any", "all"):
            yield from _exact_types(entry.get(nested) or [])


@dataclass(frozen=True)
class Delivery:
    """One HTTP delivery by the broker to a function."""

    time: float  # when it started (time.time())
    finished: float
    trigger: str
    target: Literal["subscriber", "dead-letter"]
    service: str
    event_id: str
    type: str
    subject: str | None
    status: int
    retry_after: str | None
    reply_type: str | None  # the CloudEvent the function answered with
    error_code: str | None = None  # dead letters: knativeerrorcode

    @property
    def outcome(self) -> str:
        if self.target == "dead-letter":
            return "dead-lettered"
        if 200 <= self.status < 300:
            return "replied" if self.reply_type else "delivered"
        return "retrying" if retryable(self.status) else "gave-up"


class BrokerWatch:
    """Deliveries to the functions of ``namespace``, from the proxy's hops."""

    def __init__(self, proxy: ServiceProxy, namespace: str, routes: Iterable[Route]) -> None:
        self.proxy = proxy
        self.namespace = namespace
        self.routes = {route.trigger: route for route in routes}
        by_service: dict[str, list[Route]] = {}
        for route in self.routes.values():
            by_service.setdefault(route.subscriber, []).append(route)
        for service, several in by_service.items():
            types = [t for route in several for t in route.types]
            if len(several) > 1 and (not all(route.types for route in several) or len(types) != len(set(types))):
                raise ValueError(
                    f"Knative Service {service} subscribes to Triggers {[r.trigger for r in several]} "
                    "that their event types do not tell apart"
                )
        self._routes_of = by_service
        self._sinks = {route.dead_letter for route in self.routes.values() if route.dead_letter}
        self._restarted_at = 0.0

    def data_plane_restarted(self, at: float) -> None:
        """The broker's data plane was restarted at ``at`` (time.time()): the retries it held are gone."""
        self._restarted_at = max(self._restarted_at, at)

    def _delivery(self, hop: Hop) -> Delivery | None:
        if hop.namespace != self.namespace or hop.method != "POST" or hop.ce("id") is None:
            return None
        event_type = hop.ce("type") or ""
        if hop.service in self._routes_of:
            trigger, target = self.trigger_of(hop.service, event_type), "subscriber"
        elif hop.service in self._sinks:
            failed = urlsplit(hop.request.get("ce-knativeerrordest", "")).hostname or ""
            trigger = self.trigger_of(failed.split(".", 1)[0], event_type)
            target = "dead-letter"
        else:
            return None
        return Delivery(
            time=hop.started,
            finished=hop.finished,
            trigger=trigger,
            target=target,  # type: ignore[arg-type]  # one of the two literals above
            service=hop.service,
            event_id=hop.ce("id") or "",
            type=hop.ce("type") or "",
            subject=hop.ce("subject"),
            status=hop.status,
            retry_after=hop.response.get("retry-after"),
            reply_type=hop.response.get("ce-type"),
            error_code=hop.request.get("ce-knativeerrorcode"),
        )

    def trigger_of(self, service: str, event_type: str) -> str:
        """The Trigger that delivered ``event_type`` to ``service`` ("" when none did)."""
        routes = self._routes_of.get(service, [])
        if len(routes) == 1:
            return routes[0].trigger
        return next((route.trigger for route in routes if event_type in route.types), "")

    def deliveries(self) -> list[Delivery]:
        """Every delivery to a function so far, in the order they were answered."""
        return [d for d in map(self._delivery, self.proxy.hops()) if d is not None]

    def pending(self) -> list[tuple[str, str]]:
        """(trigger, event id) pairs whose next retry is still to come."""
        attempts: dict[tuple[str, str], list[Delivery]] = {}
        dead: set[tuple[str, str]] = set()
        for delivery in self.deliveries():
            key = (delivery.trigger, delivery.event_id)
            if delivery.target == "dead-letter":
                dead.add(key)
            else:
                attempts.setdefault(key, []).append(delivery)
        return [
            key
            for key, tries in attempts.items()
            if retryable(tries[-1].status)
            and key not in dead
            and len(tries) <= self.routes[key[0]].retries
            and tries[-1].time > self._restarted_at  # made by a filter since killed: nobody retries it
        ]

    def idle(self) -> bool:
        return (
            self.proxy.in_flight() == 0
            and time.time() - self.proxy.quiet_since() >= QUIET_SECONDS
            and not self.pending()
        )

    def wait_for(self, predicate: Callable[[list[Delivery]], bool], timeout: float) -> bool:
        """Wait until ``predicate(deliveries)`` holds (checked as each hop is answered); False on timeout."""
        return self.proxy.wait(lambda hops: predicate([d for d in map(self._delivery, hops) if d is not None]), timeout)

    def answered(self, event_id: str, timeout: float) -> Delivery | None:
        """Wait until a Trigger's subscriber answered event ``event_id`` with success (2xx) or its
        dead-letter sink got it; that delivery, or None on timeout."""

        def settled(deliveries: list[Delivery]) -> Delivery | None:
            return next(
                (
                    d
                    for d in reversed(deliveries)
                    if d.event_id == event_id and (d.target == "dead-letter" or 200 <= d.status < 300)
                ),
                None,
            )

        self.wait_for(lambda deliveries: settled(deliveries) is not None, timeout)
        return settled(self.deliveries())

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is in flight and no retry is to come; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.idle():
                return True
            time.sleep(0.1)
        return self.idle()
