"""BrokerWatch: the proxy's hops read as deliveries per Trigger, and when the broker is idle.

The hops are put straight into an unstarted :class:`ServiceProxy`, as it would have recorded them.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testbed.knative import broker_watch
from testbed.knative.broker_watch import BrokerWatch, Delivery, Route
from testbed.standins.service_proxy import Hop, ServiceProxy

NS = "kubeopera-system"
INSTALL = f"tenant-install.{NS}.svc.cluster.local"
CHECK = f"tenant-check-ready.{NS}.svc.cluster.local"
DEAD = f"tenant-dead-letter.{NS}.svc.cluster.local"
ROUTES = (
    Route("tenant-install", "tenant-install", "tenant-dead-letter", 2),
    Route("tenant-check-ready", "tenant-check-ready", "tenant-dead-letter", 44),
)
T0 = 1000.0


def hop(
    host: str,
    status: int = 200,
    *,
    event: str | None = "e-1",
    method: str = "POST",
    at: float = T0,
    request: dict[str, str] | None = None,
    response: dict[str, str] | None = None,
) -> Hop:
    headers = {"ce-type": "dev.knative.apiserver.resource.add", "ce-subject": "alice", **(request or {})}
    if event is not None:
        headers["ce-id"] = event
    return Hop(at, at + 0.25, method, host, "/", status, headers, response or {})


def dead_letter(failed_host: str, event: str = "e-1", at: float = T0) -> Hop:
    return hop(
        DEAD,
        200,
        event=event,
        at=at,
        request={"ce-knativeerrordest": f"http://{failed_host}", "ce-knativeerrorcode": "503"},
    )


def watch(*hops: Hop) -> BrokerWatch:
    proxy = ServiceProxy()
    proxy._hops.extend(hops)
    return BrokerWatch(proxy, NS, ROUTES)


def delivery(status: int, *, target: str = "subscriber", reply_type: str | None = None) -> Delivery:
    return Delivery(T0, T0, "tenant-install", target, "s", "e-1", "t", None, status, None, reply_type)  # type: ignore[arg-type]


def test_a_delivery_to_a_subscriber_is_named_by_its_trigger() -> None:
    reply = {"ce-type": "io.kubeopera.tenant.provisioning", "retry-after": "15"}
    [seen] = watch(hop(INSTALL, 503, response=reply)).deliveries()
    assert seen == Delivery(
        time=T0,
        finished=T0 + 0.25,
        trigger="tenant-install",
        target="subscriber",
        service="tenant-install",
        event_id="e-1",
        type="dev.knative.apiserver.resource.add",
        subject="alice",
        status=503,
        retry_after="15",
        reply_type="io.kubeopera.tenant.provisioning",
    )


def test_a_dead_letter_is_named_by_the_trigger_of_the_service_that_failed() -> None:
    [seen] = watch(dead_letter(CHECK)).deliveries()
    assert (seen.trigger, seen.target, seen.service, seen.error_code) == (
        "tenant-check-ready",
        "dead-letter",
        "tenant-dead-letter",
        "503",
    )


def test_a_dead_letter_whose_failed_destination_is_unknown_has_no_trigger() -> None:
    [seen] = watch(dead_letter("elsewhere.other.svc.cluster.local")).deliveries()
    assert (seen.trigger, seen.target) == ("", "dead-letter")


@pytest.mark.parametrize(
    "ignored",
    [
        hop("tenant-install.other-ns.svc.cluster.local"),
        hop(INSTALL, method="GET"),
        hop(INSTALL, event=None),
        hop("broker-filter.knative-eventing.svc.cluster.local"),
        hop("broker-ingress.knative-eventing.svc.cluster.local"),
        hop(f"default-kne-trigger-kn-channel.{NS}.svc.cluster.local"),
        hop(f"broker-ingress.{NS}.svc.cluster.local"),
    ],
    ids=["other-namespace", "get", "no-ce-id", "filter", "ingress", "channel", "unknown-service"],
)
def test_hops_that_are_not_deliveries_to_a_function_are_ignored(ignored: Hop) -> None:
    assert watch(ignored).deliveries() == []


def test_deliveries_keep_the_order_of_the_hops() -> None:
    hops = (hop(INSTALL, 503, event="a"), hop(CHECK, event="b"), dead_letter(INSTALL, event="c"))
    assert [d.event_id for d in watch(*hops).deliveries()] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("made", "outcome"),
    [
        (delivery(200, reply_type="io.kubeopera.tenant.ready"), "replied"),
        (delivery(204), "delivered"),
        (delivery(503), "retrying"),
        (delivery(404), "retrying"),
        (delivery(429), "retrying"),
        (delivery(400), "gave-up"),
        (delivery(422), "gave-up"),
        (delivery(200, target="dead-letter"), "dead-lettered"),
    ],
)
def test_the_outcome_of_a_delivery(made: Delivery, outcome: str) -> None:
    assert made.outcome == outcome


def test_a_503_with_retries_left_is_pending() -> None:
    assert watch(hop(INSTALL, 503)).pending() == [("tenant-install", "e-1")]


def test_a_success_after_a_503_ends_the_retries() -> None:
    assert watch(hop(INSTALL, 503), hop(INSTALL, 200, at=T0 + 1)).pending() == []


def test_a_dead_letter_delivery_ends_the_retries() -> None:
    assert watch(hop(INSTALL, 503), dead_letter(INSTALL, at=T0 + 1)).pending() == []


def test_a_dead_letter_of_another_event_or_trigger_does_not_end_the_retries() -> None:
    hops = (hop(INSTALL, 503), dead_letter(INSTALL, event="e-2"), dead_letter(CHECK))
    assert watch(*hops).pending() == [("tenant-install", "e-1")]


def test_retries_end_after_one_plus_retry_attempts() -> None:
    attempts = [hop(INSTALL, 503, at=T0 + i) for i in range(3)]  # tenant-install: retry 2
    assert watch(*attempts[:2]).pending() == [("tenant-install", "e-1")]
    assert watch(*attempts).pending() == []


def test_a_400_is_not_retried() -> None:
    assert watch(hop(INSTALL, 400)).pending() == []


def test_a_retry_held_by_a_restarted_data_plane_is_not_pending() -> None:
    """The in-memory broker forgets the retries it held when its data plane restarts."""
    watched = watch(hop(INSTALL, 503, event="before"), hop(INSTALL, 503, event="after", at=T0 + 10))
    watched.data_plane_restarted(T0 + 5)
    assert watched.pending() == [("tenant-install", "after")]


def test_a_delivery_in_flight_when_the_data_plane_restarts_is_not_pending() -> None:
    """Started by the filter that was killed, answered after the kill: that filter would have
    retried it, and it is gone (CI, test_a_settled_pass_writes_nothing, waited 60 s on one)."""
    in_flight = Hop(T0, T0 + 8, "POST", INSTALL, "/", 503, {"ce-id": "e-1", "ce-type": "t"}, {})
    watched = watch(in_flight)
    watched.data_plane_restarted(T0 + 5)
    assert watched.pending() == []


def test_pending_is_per_trigger_and_event() -> None:
    hops = (hop(INSTALL, 503, event="a"), hop(INSTALL, 200, event="b"), hop(CHECK, 503, event="a"))
    assert watch(*hops).pending() == [("tenant-install", "a"), ("tenant-check-ready", "a")]


def at_time(monkeypatch: pytest.MonkeyPatch, now: float) -> None:
    monkeypatch.setattr(broker_watch, "time", SimpleNamespace(time=lambda: now))


def test_idle_after_the_quiet_period_with_nothing_in_flight_or_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    watched = watch(hop(INSTALL, 200))
    at_time(monkeypatch, T0 + 0.25 + broker_watch.QUIET_SECONDS)
    assert watched.idle() is True


def test_not_idle_within_the_quiet_period(monkeypatch: pytest.MonkeyPatch) -> None:
    watched = watch(hop(INSTALL, 200))
    at_time(monkeypatch, T0 + 0.25 + broker_watch.QUIET_SECONDS / 2)
    assert watched.idle() is False


def test_not_idle_while_a_request_is_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    watched = watch(hop(INSTALL, 200))
    watched.proxy._in_flight = 1
    at_time(monkeypatch, T0 + 60)
    assert watched.idle() is False


def test_not_idle_while_a_retry_is_to_come(monkeypatch: pytest.MonkeyPatch) -> None:
    watched = watch(hop(INSTALL, 503))
    at_time(monkeypatch, T0 + 60)
    assert watched.idle() is False


def test_idle_when_nothing_was_ever_seen() -> None:
    assert watch().idle() is True


def trigger(name: str, subscriber: str, delivery: dict[str, object] | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"broker": "default", "subscriber": {"ref": {"kind": "Service", "name": subscriber}}}
    if delivery is not None:
        spec["delivery"] = delivery
    return {"metadata": {"name": name}, "spec": spec}


def sink(name: str) -> dict[str, object]:
    return {"ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": name}}


BROKER_DELIVERY = {"deadLetterSink": sink("tenant-dead-letter"), "retry": 5, "backoffPolicy": "exponential"}


def test_a_trigger_route_takes_the_triggers_own_delivery() -> None:
    doc = trigger("tenant-check-ready", "tenant-check-ready", {"deadLetterSink": sink("other-sink"), "retry": 44})
    assert Route.from_trigger(doc, BROKER_DELIVERY) == Route(
        "tenant-check-ready", "tenant-check-ready", "other-sink", 44
    )


def test_a_trigger_without_delivery_takes_the_brokers() -> None:
    doc = trigger("tenant-install", "svc-install")
    assert Route.from_trigger(doc, BROKER_DELIVERY) == Route("tenant-install", "svc-install", "tenant-dead-letter", 5)


def test_a_trigger_delivery_replaces_the_brokers_whole() -> None:
    doc = trigger("tenant-install", "tenant-install", {"retry": 3})
    assert Route.from_trigger(doc, BROKER_DELIVERY) == Route("tenant-install", "tenant-install", None, 3)


def test_no_delivery_anywhere_means_no_retries_and_no_sink() -> None:
    assert Route.from_trigger(trigger("t", "s"), {}) == Route("t", "s", None, 0)


def test_a_service_subscribed_by_two_triggers_is_refused_unless_their_types_tell_them_apart() -> None:
    routes = (Route("a", "tenant-install", None, 0), Route("b", "tenant-install", None, 0))
    with pytest.raises(ValueError, match=r"tenant-install subscribes to Triggers \['a', 'b'\] that their event types"):
        BrokerWatch(ServiceProxy(), NS, routes)
    same = (Route("a", "x", None, 0, frozenset({"t1"})), Route("b", "x", None, 0, frozenset({"t1", "t2"})))
    with pytest.raises(ValueError, match="do not tell apart"):
        BrokerWatch(ServiceProxy(), NS, same)
    apart = (Route("poll", "x", None, 0, frozenset({"t1"})), Route("hint", "x", None, 0, frozenset({"t2"})))
    watch = BrokerWatch(ServiceProxy(), NS, apart)
    assert (watch.trigger_of("x", "t1"), watch.trigger_of("x", "t2"), watch.trigger_of("x", "t3")) == (
        "poll",
        "hint",
        "",
    )


def test_a_triggers_route_knows_the_types_its_filters_name() -> None:
    doc = {
        "metadata": {"name": "r"},
        "spec": {
            "subscriber": {"ref": {"name": "tenant-router"}},
            "filters": [
                {"any": [{"exact": {"type": "add"}}, {"exact": {"type": "update"}}]},
                {"any": [{"exact": {"kind": "Tenant"}}, {"exact": {"kind": "StatefulSet"}}]},
            ],
        },
    }
    assert Route.from_trigger(doc, {}).types == frozenset({"add", "update"})
