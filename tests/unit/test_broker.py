"""Tests of the local Knative Broker stand-in (shared.local.broker): Trigger loading, filters, retry
policy, Retry-After, dead letters, replies and TTL, against real local HTTP subscribers."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
import requests
from cloudevents.core.bindings.http import (
    HTTPMessage,
    from_http_event,
    to_binary_event,
    to_structured_event,
)
from cloudevents.core.v1.event import CloudEvent
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from shared.local.broker import (
    Broker,
    BrokerConfigError,
    Delivery,
    Event,
    TriggerError,
    VirtualClock,
    backoff,
    error_data,
    is_retryable,
    load_triggers,
    main,
    next_ttl,
    parse_duration,
    parse_http,
    parse_retry_after,
    parse_trigger,
    retry_wait,
)

# ----------------------------------------------------------------------------- helpers

Reply = tuple[int, dict[str, str], bytes]


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def event(self) -> Any:
        return from_http_event(HTTPMessage(self.headers, self.body))


@dataclass
class Subscriber:
    """A real HTTP server on 127.0.0.1 that records requests and answers from a script."""

    script: Callable[[Received], Reply]
    received: list[Received] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        def app(environ: dict[str, Any], start_response: Any) -> Any:
            request = Request(environ)
            got = Received({k.lower(): v for k, v in request.headers.items()}, request.get_data(), time.monotonic())
            self.received.append(got)
            status, headers, body = self.script(got)
            return Response(body, status, headers=headers)(environ, start_response)

        self._server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}/"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def answers(*replies: Reply) -> Callable[[Received], Reply]:
    """A script answering `replies` in order, then repeating the last one."""
    queue = list(replies)

    def script(_: Received) -> Reply:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return script


OK: Reply = (202, {}, b"")


@pytest.fixture
def subscribers() -> Iterator[Callable[[Callable[[Received], Reply]], Subscriber]]:
    started: list[Subscriber] = []

    def start(script: Callable[[Received], Reply]) -> Subscriber:
        started.append(Subscriber(script))
        return started[-1]

    yield start
    for subscriber in started:
        subscriber.stop()


@pytest.fixture
def brokers() -> Iterator[Callable[..., Broker]]:
    made: list[Broker] = []

    def make(*args: Any, **kwargs: Any) -> Broker:
        made.append(Broker(*args, **kwargs))
        return made[-1]

    yield make
    for broker in made:
        broker.stop()


def trigger_doc(
    name: str,
    subscriber: str,
    *,
    filter_: dict[str, Any] | None = None,
    filters: list[Any] | None = None,
    delivery: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "broker": "default",
        "subscriber": {"ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": subscriber}},
    }
    if filter_ is not None:
        spec["filter"] = filter_
    if filters is not None:
        spec["filters"] = filters
    if delivery is not None:
        spec["delivery"] = delivery
    return {
        "apiVersion": "eventing.knative.dev/v1",
        "kind": "Trigger",
        "metadata": {"name": name, "namespace": "kubeopera-system"},
        "spec": spec,
    }


DLS = {"ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "dead-letter"}}


def event(type_: str = "io.test.a", **extensions: str) -> Event:
    attributes = {
        "specversion": "1.0",
        "id": f"id-{type_}",
        "source": "/test",
        "type": type_,
        "subject": "kubeopera-system/t1",
        "datacontenttype": "application/json",
        **extensions,
    }
    return Event(attributes, b'{"name":"t1"}')


def sdk_reply(type_: str, structured: bool = False, headers: dict[str, str] | None = None) -> Reply:
    reply = CloudEvent(
        {
            "type": type_,
            "source": "/kubeopera/tenants/test",
            "id": f"reply-{type_}",
            "datacontenttype": "application/json",
        },
        {"name": "t1"},
    )
    message = to_structured_event(reply) if structured else to_binary_event(reply)
    return 200, {**message.headers, **(headers or {})}, message.body


def ext(received: Received, name: str) -> str | None:
    return received.headers.get(f"ce-{name}")


# ------------------------------------------------------------------------ Trigger files

INSTALL_YAML = """\
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata:
  name: tenant-install
  namespace: kubeopera-system
spec:
  broker: default
  filters:
    - any:
        - exact: {type: dev.knative.apiserver.resource.add}
        - exact: {type: dev.knative.apiserver.resource.update}
    - exact: {kind: Tenant}
  subscriber:
    ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: tenant-install}
  delivery:
    retry: 5
    backoffPolicy: exponential
    backoffDelay: PT1S
    deadLetterSink:
      ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: tenant-dead-letter}
"""

CHECK_READY_YAML = """\
# a comment, then two documents: a ConfigMap (skipped) and the Trigger
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata:
  name: tenant-check-ready
spec:
  broker: default
  filter:
    attributes:
      type: io.kubeopera.tenant.provisioning
  subscriber:
    ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: tenant-check-ready}
    uri: /events
  delivery:
    retry: 40
    retryAfterMax: PT15S
    deadLetterSink:
      ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: tenant-dead-letter}
"""


def test_load_triggers_reads_knative_trigger_yaml(tmp_path: Path) -> None:
    (tmp_path / "tenant-install.yaml").write_text(INSTALL_YAML)
    (tmp_path / "tenant-check-ready.yaml").write_text(CHECK_READY_YAML)
    (tmp_path / "kustomization.yaml").write_text("resources: [tenant-install.yaml]\n")
    (tmp_path / "notes.txt").write_text("kind: Trigger\n")

    triggers = {t.name: t for t in load_triggers(tmp_path)}

    assert set(triggers) == {"tenant-install", "tenant-check-ready"}
    install = triggers["tenant-install"]
    assert install.namespace == "kubeopera-system" and install.broker == "default"
    assert install.subscriber.service == "tenant-install"
    assert [f.dialect for f in install.filters] == ["any", "exact"]
    assert install.filters[1].attributes == (("kind", "Tenant"),)
    assert install.delivery is not None
    assert (install.delivery.retry, install.delivery.backoff_policy, install.delivery.backoff_delay) == (
        5,
        "exponential",
        1.0,
    )
    assert install.delivery.dead_letter_sink is not None
    assert install.delivery.dead_letter_sink.service == "tenant-dead-letter"
    check = triggers["tenant-check-ready"]
    assert check.namespace is None and check.filters == ()
    assert check.filter_attributes == (("type", "io.kubeopera.tenant.provisioning"),)
    assert check.subscriber.uri == "/events"
    assert check.delivery is not None
    assert (check.delivery.retry, check.delivery.retry_after_max, check.delivery.backoff_policy) == (40, 15.0, None)
    assert check.source.endswith("tenant-check-ready.yaml")


@pytest.mark.parametrize(
    ("spec_change", "message"),
    [
        ({"filters": [{"cesql": "type = 'a'"}]}, "cesql filters are not supported"),
        ({"filters": [{"exact": {"type": "a"}, "prefix": {"type": "b"}}]}, "exactly one dialect"),
        ({"filters": [{"exact": {"type": ""}}]}, "is empty"),
        ({"filters": [{"exact": {"Type": "a"}}]}, "lowercase letters and digits"),
        ({"filter": {"attributes": {"ready": True}}}, "must be a string"),
        ({"delivery": {"backoffPolicy": "fibonacci"}}, "backoffPolicy must be linear or exponential"),
        ({"delivery": {"backoffDelay": "1s"}}, "not an ISO-8601 duration"),
        ({"delivery": {"retry": -1}}, "retry must be an integer >= 0"),
        ({"delivery": {"retryAfter": "PT1S"}}, "unknown field"),
        ({"subscriber": {"ref": {"apiVersion": "v1", "kind": "Service", "name": "x"}}}, "only serving.knative.dev/v1"),
        ({"broker": None}, "spec.broker is missing"),
    ],
)
def test_unusable_triggers_fail_clearly(spec_change: dict[str, Any], message: str) -> None:
    document = trigger_doc("t", "svc")
    document["spec"].update(spec_change)
    with pytest.raises(TriggerError, match=message) as raised:
        parse_trigger(document, source="t.yaml")
    assert "t.yaml: Trigger t" in str(raised.value)


def test_load_triggers_rejects_duplicate_names(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(INSTALL_YAML)
    (tmp_path / "b.yaml").write_text(INSTALL_YAML)
    with pytest.raises(TriggerError, match="also defined in"):
        load_triggers(tmp_path)


def test_unresolvable_subscriber_fails_at_broker_construction(tmp_path: Path) -> None:
    (tmp_path / "tenant-install.yaml").write_text(INSTALL_YAML)
    triggers = load_triggers(tmp_path)
    with pytest.raises(BrokerConfigError, match="tenant-dead-letter.*--service tenant-dead-letter="):
        Broker(triggers, {"tenant-install": "http://127.0.0.1:1"}.get)
    assert main(["--triggers", str(tmp_path), "--service", "tenant-install=http://127.0.0.1:1"]) == 2


def test_the_repository_trigger_files_load() -> None:
    folder = Path(__file__).resolve().parents[2] / "eventing" / "triggers"
    triggers = load_triggers(folder)
    assert {t.name for t in triggers} >= {
        "tenant-install",
        "tenant-check-ready",
        "tenant-store-kubeconfig",
        "tenant-notify-api",
    }
    broker = Broker(triggers, lambda name: f"http://127.0.0.1:1/{name}")
    assert len(broker.triggers) == len(triggers)  # all for kubeopera-system/default, all resolvable


# ------------------------------------------------------------------------------ filters


INSTALL = parse_trigger(__import__("yaml").safe_load(INSTALL_YAML))


@pytest.mark.parametrize(
    ("type_", "extensions", "expected"),
    [
        ("dev.knative.apiserver.resource.add", {"kind": "Tenant"}, True),
        ("dev.knative.apiserver.resource.update", {"kind": "Tenant"}, True),
        ("dev.knative.apiserver.resource.delete", {"kind": "Tenant"}, False),
        ("dev.knative.apiserver.resource.add", {"kind": "Secret"}, False),
        ("dev.knative.apiserver.resource.add", {}, False),  # a missing extension fails
    ],
)
def test_filters_list_any_and_exact(type_: str, extensions: dict[str, str], expected: bool) -> None:
    assert INSTALL.matches(event(type_, **extensions)) is expected


def _trigger(**spec: Any) -> Any:
    return parse_trigger(trigger_doc("t", "svc", **spec))


@pytest.mark.parametrize(
    ("trigger_spec", "extensions", "expected"),
    [
        ({}, {}, True),  # no filter: everything
        ({"filter_": {"attributes": {"type": "io.test.a"}}}, {}, True),
        ({"filter_": {"attributes": {"type": "io.test.A"}}}, {}, False),  # case-sensitive
        ({"filter_": {"attributes": {"type": "io.test.a", "kind": "Tenant"}}}, {}, False),  # every key must exist
        ({"filter_": {"attributes": {"kind": ""}}}, {"kind": "Tenant"}, True),  # "" = present and non-empty
        ({"filter_": {"attributes": {"kind": ""}}}, {}, False),
        ({"filter_": {"attributes": {"dataschema": ""}}}, {}, False),  # unset core attribute counts as empty
        ({"filters": [{"prefix": {"type": "io.test."}}]}, {}, True),
        ({"filters": [{"suffix": {"subject": "/t1"}}]}, {}, True),
        ({"filters": [{"suffix": {"subject": "/t2"}}]}, {}, False),
        ({"filters": [{"not": {"exact": {"type": "io.test.a"}}}]}, {}, False),
        (
            {"filters": [{"all": [{"exact": {"type": "io.test.a"}}, {"exact": {"kind": "Tenant"}}]}]},
            {"kind": "Tenant"},
            True,
        ),
        ({"filters": [{"exact": {"type": "io.test.a"}}], "filter_": {"attributes": {"type": "other"}}}, {}, True),
    ],
)
def test_filter_semantics(trigger_spec: dict[str, Any], extensions: dict[str, str], expected: bool) -> None:
    assert _trigger(**trigger_spec).matches(event("io.test.a", **extensions)) is expected


# ------------------------------------------------------------------- retry policy (pure)


def test_parse_duration() -> None:
    assert parse_duration("PT1S") == 1.0
    assert parse_duration("PT0.5S") == 0.5
    assert parse_duration("PT1M30S") == 90.0
    assert parse_duration("P1DT1H") == 90000.0
    for bad in ("1s", "P", "PT", "15"):
        with pytest.raises(ValueError):
            parse_duration(bad)


@pytest.mark.parametrize("status", [None, 500, 502, 503, 504, 404, 408, 409, 429])
def test_retried_codes(status: int | None) -> None:
    assert is_retryable(status)


@pytest.mark.parametrize("status", [400, 401, 403, 405, 410, 413, 422, 301, 302])
def test_final_codes(status: int) -> None:
    assert not is_retryable(status)


def test_backoff_formulas() -> None:
    exponential = Delivery(retry=5, backoff_policy="exponential", backoff_delay=1.0)
    linear = Delivery(retry=5, backoff_policy="linear", backoff_delay=2.0)
    assert [backoff(exponential, n) for n in range(5)] == [1, 2, 4, 8, 16]
    assert [backoff(linear, n) for n in range(4)] == [0, 2, 4, 6]  # the first linear retry is immediate
    assert backoff(Delivery(retry=3), 2) == 0  # no policy, no delay
    assert backoff(Delivery(retry=3, backoff_delay=5.0), 2) == 0  # delay without a policy
    assert backoff(Delivery(retry=3, backoff_policy="exponential"), 2) == 0  # policy without a delay


def test_retry_after_rule() -> None:
    check_ready = Delivery(retry=40, retry_after_max=15.0)
    now = 1_000_000.0
    assert retry_wait(check_ready, 0, 503, "15", now) == 15
    assert retry_wait(check_ready, 7, 503, "60", now) == 15  # capped at retryAfterMax
    assert retry_wait(check_ready, 0, 429, "5", now) == 5
    assert retry_wait(check_ready, 0, 500, "15", now) == 0  # only 429 and 503 carry Retry-After
    assert retry_wait(check_ready, 0, 503, None, now) == 0
    assert retry_wait(check_ready, 0, 503, "soon", now) == 0
    # without retryAfterMax the header is ignored (delivery-retryafter is opt-in)
    assert retry_wait(Delivery(retry=5, backoff_policy="exponential", backoff_delay=1.0), 1, 503, "15", now) == 2
    # the larger of Retry-After and the backoff wins
    both = Delivery(retry=5, backoff_policy="exponential", backoff_delay=1.0, retry_after_max=15.0)
    assert retry_wait(both, 0, 503, "3", now) == 3
    assert retry_wait(both, 3, 503, "3", now) == 8
    assert retry_wait(both, 0, 503, "-5", now) == 1
    # HTTP-date form, relative to the wall clock
    assert parse_retry_after(formatdate(now + 10, usegmt=True), now) == pytest.approx(10)


def test_error_data_is_base64_cut_at_1024_characters() -> None:
    body = bytes(range(256)) * 8
    assert error_data(b"bad spec") == base64.b64encode(b"bad spec").decode()
    assert error_data(body) == base64.b64encode(body).decode()[:1024]
    assert len(error_data(body)) == 1024


def test_ttl_defaulting() -> None:
    assert next_ttl(event(), 255) == 255
    assert next_ttl(event(knativebrokerttl="10"), 255) == 9
    assert next_ttl(event(knativebrokerttl="0"), 255) == 0
    assert next_ttl(event(knativebrokerttl="many"), 255) == 255


def test_parse_http_binary_structured_and_not_an_event() -> None:
    sdk_event = CloudEvent(
        {"type": "t", "source": "/s", "id": "1", "datacontenttype": "application/json"}, {"a": [1, True]}
    )
    for message in (to_binary_event(sdk_event), to_structured_event(sdk_event)):
        parsed = parse_http(message.headers, message.body)
        assert (parsed.id, parsed.type, parsed.attributes["source"]) == ("1", "t", "/s")
        assert parsed.data == b'{"a":[1,true]}' or parsed.data == b'{"a": [1, true]}'
    with pytest.raises(ValueError, match="not a CloudEvent"):
        parse_http({"Content-Type": "application/json"}, b"{}")
    with pytest.raises(ValueError, match="source"):
        parse_http({"ce-specversion": "1.0", "ce-id": "1", "ce-type": "t"}, b"")


# ------------------------------------------------------------------ delivery over HTTP


def test_http_ingest_delivers_in_binary_mode_with_prefer_reply(subscribers: Any, brokers: Any) -> None:
    sub = subscribers(answers(OK))
    broker = brokers([_trigger(filter_={"attributes": {"type": "io.test.a"}})], {"svc": sub.url}.get)
    port = broker.start()
    trace = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "k=v"}
    sdk_event = CloudEvent(
        {
            "type": "io.test.a",
            "source": "/test",
            "id": "e1",
            "subject": "ns/a b",
            "datacontenttype": "application/json",
        },
        {"name": "t1"},
    )

    binary = to_binary_event(sdk_event)
    structured = to_structured_event(CloudEvent({**sdk_event.get_attributes(), "id": "e2"}, {"name": "t1"}))
    for message in (binary, structured):
        response = requests.post(
            f"http://127.0.0.1:{port}/", data=message.body, headers={**message.headers, **trace}, timeout=5
        )
        assert response.status_code == 202
    assert broker.wait_idle(5)

    assert [r.event.get_id() for r in sub.received] == ["e1", "e2"]
    for received in sub.received:
        assert received.headers["ce-specversion"] == "1.0"  # binary mode, also for the structured ingest
        assert received.headers["content-type"] == "application/json"
        assert received.headers["prefer"] == "reply"
        assert received.headers["traceparent"] == trace["traceparent"]
        assert received.headers["tracestate"] == "k=v"
        assert "ce-knativebrokerttl" not in received.headers  # the subscriber never sees the TTL
        assert ext(received, "knativearrivaltime")
        assert received.event.get_subject() == "ns/a b"
        assert received.event.get_data() == {"name": "t1"}


def test_http_ingest_refusals_and_delivery_listing(subscribers: Any, brokers: Any) -> None:
    sub = subscribers(answers(OK))
    broker = brokers([_trigger()], {"svc": sub.url}.get, max_body_bytes=1000)
    base = f"http://127.0.0.1:{broker.start()}"

    plain = requests.post(base + "/", json={"hello": "world"}, timeout=5)
    assert plain.status_code == 400 and "not a CloudEvent" in plain.text
    invalid = requests.post(base + "/", headers={"ce-specversion": "1.0", "ce-id": "1", "ce-type": "t"}, timeout=5)
    assert invalid.status_code == 400 and "source" in invalid.text
    headers, body = to_binary_event(CloudEvent({"type": "t", "source": "/s"}, "x" * 2000)).headers, b"x" * 2000
    assert requests.post(base + "/", data=body, headers=headers, timeout=5).status_code == 413
    assert requests.get(base + "/", timeout=5).status_code == 405
    assert requests.post(base + "/other/broker", json={}, timeout=5).status_code == 404
    assert broker.publish(event()) == 202
    assert broker.wait_idle(5)

    listing = requests.get(base + "/_/deliveries", timeout=5).json()
    assert len(sub.received) == 1
    assert listing == [
        {
            **listing[0],
            "trigger": "t",
            "target": "subscriber",
            "url": sub.url,
            "event_id": "id-io.test.a",
            "type": "io.test.a",
            "subject": "kubeopera-system/t1",
            "attempt": 1,
            "status": 202,
            "error": None,
            "next_delay": None,
            "outcome": "delivered",
        }
    ]


@pytest.mark.parametrize("structured", [False, True])
def test_reply_goes_back_in_and_is_routed(subscribers: Any, brokers: Any, structured: bool) -> None:
    reply_trace = "00-11111111111111111111111111111111-2222222222222222-01"
    first = subscribers(answers(sdk_reply("io.test.b", structured, {"traceparent": reply_trace})))
    second = subscribers(answers(OK))
    broker = brokers(
        [
            parse_trigger(trigger_doc("a", "first", filter_={"attributes": {"type": "io.test.a"}})),
            parse_trigger(trigger_doc("b", "second", filter_={"attributes": {"type": "io.test.b"}})),
        ],
        {"first": first.url, "second": second.url}.get,
    )

    incoming_trace = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01"
    broker.publish(event("io.test.a"), headers={"traceparent": incoming_trace})
    assert broker.wait_idle(5)

    assert len(first.received) == 1 and len(second.received) == 1
    assert first.received[0].headers["traceparent"] == incoming_trace
    got = second.received[0]
    assert got.event.get_type() == "io.test.b" and got.event.get_data() == {"name": "t1"}
    assert got.headers["traceparent"] == reply_trace  # trace context of the reply response travels on
    assert "ce-knativebrokerttl" not in got.headers
    assert [(a.trigger, a.outcome) for a in broker.deliveries()] == [("a", "replied"), ("b", "delivered")]


def test_final_code_goes_straight_to_dead_letter_with_error_extensions(subscribers: Any, brokers: Any) -> None:
    sub = subscribers(answers((422, {"Content-Type": "text/plain"}, b"bad spec")))
    dead = subscribers(answers(OK))
    broker = brokers(
        [_trigger(delivery={"retry": 5, "backoffPolicy": "linear", "backoffDelay": "PT1S", "deadLetterSink": DLS})],
        {"svc": sub.url, "dead-letter": dead.url}.get,
    )

    broker.publish(event())
    assert broker.wait_idle(5)

    assert len(sub.received) == 1  # 422 is not retried
    [letter] = dead.received
    assert letter.event.get_id() == "id-io.test.a" and letter.event.get_data() == {"name": "t1"}
    assert ext(letter, "knativeerrordest") == sub.url
    assert ext(letter, "knativeerrorcode") == "422"
    assert base64.b64decode(ext(letter, "knativeerrordata") or "") == b"bad spec"
    assert ext(letter, "knativebrokerttl") == "255"  # the event as ingested
    assert "prefer" not in letter.headers
    assert [(a.target, a.status, a.outcome) for a in broker.deliveries()] == [
        ("subscriber", 422, "gave-up"),
        ("dead-letter", 202, "delivered"),
    ]


def test_retryable_codes_are_retried_with_real_backoff_then_dead_lettered(subscribers: Any, brokers: Any) -> None:
    sub = subscribers(answers((503, {}, b""), (404, {}, b""), (500, {}, b"boom")))
    dead = subscribers(answers(OK))
    broker = brokers(
        [
            _trigger(
                delivery={"retry": 2, "backoffPolicy": "exponential", "backoffDelay": "PT0.1S", "deadLetterSink": DLS}
            )
        ],
        {"svc": sub.url, "dead-letter": dead.url}.get,
    )

    broker.publish(event())
    assert broker.wait_idle(5)

    attempts = [a for a in broker.deliveries() if a.target == "subscriber"]
    assert [(a.attempt, a.status, a.next_delay, a.outcome) for a in attempts] == [
        (1, 503, 0.1, "retrying"),
        (2, 404, 0.2, "retrying"),
        (3, 500, None, "gave-up"),
    ]
    gaps = [later.at - earlier.at for earlier, later in zip(sub.received, sub.received[1:], strict=False)]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19
    [letter] = dead.received
    assert ext(letter, "knativeerrorcode") == "500"
    assert base64.b64decode(ext(letter, "knativeerrordata") or "") == b"boom"


def test_retry_after_paces_retries_on_the_broker_clock(subscribers: Any, brokers: Any) -> None:
    not_yet: Reply = (503, {"Retry-After": "15"}, b"")
    sub = subscribers(answers(not_yet, not_yet, not_yet, sdk_reply("io.test.ready")))
    clock = VirtualClock()
    broker = brokers(
        [_trigger(filter_={"attributes": {"type": "io.test.a"}}, delivery={"retry": 40, "retryAfterMax": "PT15S"})],
        {"svc": sub.url}.get,
        clock=clock,
    )

    started = time.monotonic()
    broker.publish(event())
    assert broker.wait_idle(5)

    attempts = broker.deliveries()
    assert [(a.attempt, a.clock, a.next_delay) for a in attempts] == [
        (1, 0.0, 15.0),
        (2, 15.0, 15.0),
        (3, 30.0, 15.0),
        (4, 45.0, None),
    ]
    assert attempts[-1].outcome == "replied"
    assert time.monotonic() - started < 3  # 45 s of broker time, no real waiting


def test_malformed_reply_is_a_failed_delivery(subscribers: Any, brokers: Any) -> None:
    sub = subscribers(answers((200, {"Content-Type": "text/plain"}, b"hello")))
    dead = subscribers(answers(OK))
    broker = brokers(
        [_trigger(delivery={"retry": 1, "deadLetterSink": DLS})], {"svc": sub.url, "dead-letter": dead.url}.get
    )

    broker.publish(event())
    assert broker.wait_idle(5)

    attempts = [a for a in broker.deliveries() if a.target == "subscriber"]
    assert [(a.status, a.outcome) for a in attempts] == [(200, "retrying"), (200, "gave-up")]
    assert attempts[0].error is not None and "malformed reply" in attempts[0].error
    [letter] = dead.received  # Knative's broker-filter answers 502 with no body: no error extensions
    assert ext(letter, "knativeerrorcode") is None and ext(letter, "knativeerrordest") is None


def test_no_response_is_retried_and_reported_as_500(subscribers: Any, brokers: Any) -> None:
    dead = subscribers(answers(OK))
    closed = subscribers(answers(OK))
    closed.stop()  # nothing listens there any more
    broker = brokers(
        [_trigger(delivery={"retry": 1, "deadLetterSink": DLS})], {"svc": closed.url, "dead-letter": dead.url}.get
    )

    broker.publish(event())
    assert broker.wait_idle(10)

    attempts = [a for a in broker.deliveries() if a.target == "subscriber"]
    assert [(a.status, a.outcome) for a in attempts] == [(None, "retrying"), (None, "gave-up")]
    [letter] = dead.received
    assert ext(letter, "knativeerrorcode") == "500"
    assert base64.b64decode(ext(letter, "knativeerrordata") or "").startswith(b"dispatch error: ")


def test_a_waiting_retry_does_not_hold_up_other_deliveries(subscribers: Any, brokers: Any) -> None:
    slow = subscribers(answers((503, {}, b""), OK))
    fast = subscribers(answers(OK))
    broker = brokers(
        [
            parse_trigger(
                trigger_doc(
                    "a",
                    "slow",
                    filter_={"attributes": {"type": "io.test.a"}},
                    delivery={"retry": 1, "backoffPolicy": "exponential", "backoffDelay": "PT0.5S"},
                )
            ),
            parse_trigger(trigger_doc("b", "fast", filter_={"attributes": {"type": "io.test.b"}})),
        ],
        {"slow": slow.url, "fast": fast.url}.get,
    )

    broker.publish(event("io.test.a"))
    deadline = time.monotonic() + 5
    while not slow.received and time.monotonic() < deadline:
        time.sleep(0.01)
    broker.publish(event("io.test.b"))
    assert broker.wait_idle(5)

    assert len(slow.received) == 2 and len(fast.received) == 1
    assert fast.received[0].at < slow.received[1].at


def test_ttl_ends_a_reply_loop(subscribers: Any, brokers: Any) -> None:
    loop = subscribers(answers(sdk_reply("io.test.a")))  # answers every event with another one like it
    dead = subscribers(answers(OK))
    broker = brokers(
        [_trigger(filter_={"attributes": {"type": "io.test.a"}}, delivery={"deadLetterSink": DLS})],
        {"svc": loop.url, "dead-letter": dead.url}.get,
        ttl=3,
    )
    port = broker.start()

    assert broker.publish(event()) == 202
    assert broker.wait_idle(5)

    assert len(loop.received) == 3  # TTL 3, 2, 1; the reply to the last would have TTL 0
    [letter] = dead.received
    assert ext(letter, "knativeerrorcode") == "400"
    assert ext(letter, "knativeerrordest") == f"http://127.0.0.1:{port}/kubeopera-system/default"
    assert ext(letter, "knativebrokerttl") == "1"
    assert broker.publish(event(knativebrokerttl="1")) == 400  # an event arriving with TTL 1 is refused
