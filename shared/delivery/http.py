"""The HTTP face of every function, and the one place where errors become status codes.

``function_app`` wraps a step (``handle(event, ref) -> reply | None``) in a Flask app that
Knative (or the local broker) delivers to:

=========================  ======  ==========================================================
outcome                    status  broker does
=========================  ======  ==========================================================
sender not the broker      401     (not from the broker: refused before the body is read)
reply event                200     puts the reply (binary mode) back into the broker
nothing to do / done       204     ends the delivery (also: the Tenant vanished mid-step, or
                                   the event is about a Tenant outside ``Step.namespace``)
``BadEvent``               400     dead-letters it (no retry); nothing was changed
``PermanentError``         422     dead-letters it; the Tenant was marked Failed first
``TemporaryError``         503     re-delivers, after ``Retry-After`` when the error names one
anything unexpected        500     re-delivers (with the Trigger's backoff)
=========================  ======  ==========================================================

With a ``SenderCheck`` (``shared.delivery.senders``; on unless ``SENDER_IDENTITY=off``) a request is
read only when its bearer token proves the broker sent it for this function's Trigger; a refusal
is counted in ``kubeopera_tenant_deliveries_refused_total`` and makes no span and no reconcile.

Nothing escapes this mapping: an error while marking the Tenant Failed (a 403 on the status
write, an unexpected exception) still gets a JSON answer (503 when marking may work later, 422
otherwise, 500 for a bug), and every delivery is counted in the metrics, whatever happened.
Each one ends with one ``answered`` log line: status, event type and id, seconds, and the
seconds and operations spent in helm (``shared.observability.timing``), so a slow delivery says where its
time went without tracing on.

A ``Conflict`` (someone wrote the Tenant first) re-runs the step on fresh data up to three times
before it is answered as temporary. Bodies larger than 1 MiB are refused with 413. Error bodies
are ``{"error": message}``, with ``"inHand": true`` when another process is doing the work
(``WorkInHand``: dead-letter does not fail a Tenant for it); messages never hold secrets. ``/healthz``, ``/readyz`` and
``/metrics`` share the port, since a Knative Service exposes one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from cloudevents.core.base import BaseCloudEvent
from flask import Flask, Response, request
from werkzeug.exceptions import RequestEntityTooLarge

from shared.delivery import events
from shared.delivery.senders import Refused, SenderCheck
from shared.errors import BadEvent, Conflict, PermanentError, TemporaryError, TenantGone, WorkInHand
from shared.model.tenant import TenantRef
from shared.observability import logs, metrics, timing, tracing

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
IN_HAND = "inHand"  # in an error body: another process is doing this work (errors.WorkInHand)
CONFLICT_ATTEMPTS = 3

Handle = Callable[[BaseCloudEvent, TenantRef], BaseCloudEvent | None]


def _always_ready() -> bool:
    return True


def _no_tenant_to_fail(ref: TenantRef, err: PermanentError) -> None:
    return None


@dataclass(frozen=True)
class Step:
    """One function: its name, the event types it takes, and what it does.

    A step about one Tenant has ``handle`` (it gets the Tenant the event names, and may reply)
    and ``on_permanent`` (marks that Tenant Failed). A step that acts on a tick (resync) has
    ``tick`` instead: it gets the event alone and never replies.
    """

    name: str
    accepts: frozenset[str]
    handle: Handle | None = None
    on_permanent: Callable[[TenantRef, PermanentError], object] = _no_tenant_to_fail
    ready: Callable[[], bool] = field(default=_always_ready)
    # Whether the process still does its work (``/healthz``); False makes the kubelet restart it.
    # A step's work is its deliveries, so only a step that works on its own (the vCluster watch's
    # thread) says anything but True.
    alive: Callable[[], bool] = field(default=_always_ready)
    tick: Callable[[BaseCloudEvent], None] | None = None
    # The namespace whose Tenants this function serves (``TENANT_NAMESPACE``): the ApiServerSource
    # watches only it, so an event about a Tenant elsewhere is foreign, and is ignored.
    namespace: str | None = None


def _error(status: int, message: str, retry_after: int | None = None, in_hand: bool = False) -> Response:
    body: dict[str, object] = {"error": message} | ({IN_HAND: True} if in_hand else {})
    response = Response(json.dumps(body), status=status, mimetype="application/json")
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def _trace_id(traceparent: str) -> str:
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else ""


def function_app(step: Step, senders: SenderCheck | None = None) -> Flask:
    """The Flask app of one step; with ``senders``, only the broker's deliveries are read."""
    metrics.start(step.name)
    app = Flask(step.name)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    @app.get("/healthz")
    def healthz() -> Response:
        if step.alive():
            return Response("ok\n", mimetype="text/plain")
        return Response("not alive\n", status=503, mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        if step.ready():
            return Response("ok\n", mimetype="text/plain")
        return Response("not ready\n", status=503, mimetype="text/plain")

    @app.get("/metrics")
    def metrics_text() -> Response:
        return Response(metrics.exposition(), mimetype=metrics.CONTENT_TYPE)

    @app.post("/")
    def receive() -> Response:
        if senders is not None:
            refusal = _refuse_unknown_sender(step, senders)
            if refusal is not None:
                return refusal
        result, code, event_type, event_id = "error", 500, "", ""
        headers = {k.lower(): v for k, v in request.headers.items()}
        with timing.delivery() as clock:
            try:
                read = _read_event()
                event = None if isinstance(read, tuple) else read
                with tracing.delivery(step.name, tracing.incoming(headers, event)) as span:
                    traceparent = tracing.current_traceparent()
                    with logs.bind(function=step.name, traceparent=traceparent, trace_id=_trace_id(traceparent)):
                        if isinstance(read, tuple):  # refused before it was an event
                            response, result = read
                        else:
                            event_type, event_id = read.get_type(), read.get_id()
                            span.update_name(f"{step.name} {event_type}")
                            span.set_attributes(tracing.event_attributes(read))
                            response, result = _deliver(step, read)
                    code = response.status_code
                    tracing.outcome(span, code, result)
                return response
            except Exception:  # _deliver maps everything; this is the last line of defence
                log.exception("unexpected failure outside the error mapping")
                return _error(500, "internal error; see the function's logs")
            finally:
                seconds = clock.seconds()
                log.info(
                    "answered",
                    extra={
                        "function": step.name,
                        "status": code,
                        "result": result,
                        "type": event_type,
                        "id": event_id,
                        "seconds": round(seconds, 6),
                        "helm_seconds": round(clock.helm_seconds, 6),
                        "helm_operations": clock.helm_operations,
                    },
                )
                metrics.RECONCILE_TOTAL.labels(step.name, result).inc()
                if result == "error":
                    metrics.RECONCILE_ERRORS.labels(step.name).inc()
                metrics.RECONCILE_TIME.labels(step.name).observe(seconds)
                metrics.DELIVERIES.labels(step.name, _known_type(step, event_type), str(code)).inc()

    return app


def _refuse_unknown_sender(step: Step, senders: SenderCheck) -> Response | None:
    """None when the broker sent this request; otherwise the answer (the body stays unread)."""
    try:
        subject = senders.verify(request.headers.get("Authorization"))
    except Refused as refused:
        log.warning(
            "delivery refused: the sender is not the broker",
            extra={"function": step.name, "reason": refused.reason, "error": str(refused)},
        )
        metrics.REFUSED.labels(step.name, refused.reason).inc()
        metrics.DELIVERIES.labels(step.name, "other", "401").inc()
        response = _error(401, str(refused))
        response.headers["WWW-Authenticate"] = f'Bearer realm="{step.name}"'
        return response
    except (TemporaryError, PermanentError) as err:  # a 403 on the TokenReview is our RBAC, not the sender
        log.error("could not verify the sender; asking for re-delivery", extra={"error": str(err)})
        metrics.DELIVERIES.labels(step.name, "other", "503").inc()
        return _error(503, f"could not verify the sender: {err}", getattr(err, "retry_after", None) or 10)
    log.debug("sender verified", extra={"sender": subject})
    return None


def _known_type(step: Step, event_type: str) -> str:
    """The event type as a label: one the step takes, or ``other`` (a label must not be free text)."""
    return event_type if event_type in step.accepts else "other"


def _read_event() -> BaseCloudEvent | tuple[Response, str]:
    """The delivered event, or the answer (and result) that refuses it."""
    try:
        return events.parse(dict(request.headers), request.get_data(cache=False))
    except RequestEntityTooLarge:
        log.warning("oversized request refused")
        return _error(413, f"request body larger than {MAX_BODY_BYTES} bytes"), "error"
    except BadEvent as err:
        log.warning("bad event refused", extra={"error": str(err)})
        return _error(400, str(err)), "error"


def _deliver(step: Step, event: BaseCloudEvent) -> tuple[Response, str]:
    ref: TenantRef | None = None
    try:
        with logs.bind(event_id=event.get_id(), event_type=event.get_type()):
            if event.get_type() not in step.accepts:
                raise BadEvent(f"{step.name} does not handle events of type {event.get_type()!r}")
            if step.tick is not None:
                step.tick(event)
                log.info("delivery done")
                return Response(status=204), "success"
            ref = events.tenant_ref(event)
            tracing.annotate(tenant=ref.key)
            with logs.bind(tenant=ref.key):
                if step.namespace is not None and ref.namespace != step.namespace:
                    log.warning("event about a Tenant outside the namespace this function serves; ignored")
                    return Response(status=204), "success"
                reply = _run(step, event, ref)
                if reply is None:
                    log.info("delivery done")
                    return Response(status=204), "success"
                headers, payload = events.to_binary(tracing.stamp(reply))
                log.info("delivery done; replying", extra={"reply_type": reply.get_type()})
                return Response(payload, status=200, headers=headers), "success"
    except BadEvent as err:
        log.warning("bad event refused", extra={"error": str(err)})
        return _error(400, str(err)), "error"
    except TenantGone as err:
        log.info("tenant vanished while the step ran; nothing left to do", extra={"error": str(err)})
        return Response(status=204), "success"
    except PermanentError as err:
        log.error("permanent failure", extra={"error": str(err), "reason": err.reason})
        if ref is not None:
            marking = _mark_failed(step, ref, err)
            if marking is not None:
                return marking, "error"
        return _error(422, str(err)), "error"
    except TemporaryError as err:
        log.info(
            "temporary condition; asking for re-delivery", extra={"error": str(err), "retry_after": err.retry_after}
        )
        return _error(503, str(err), err.retry_after, in_hand=isinstance(err, WorkInHand)), "requeue"
    except Exception:
        log.exception("unexpected failure")
        return _error(500, "internal error; see the function's logs"), "error"


def _mark_failed(step: Step, ref: TenantRef, err: PermanentError) -> Response | None:
    """Mark the Tenant Failed; an answer other than 422 if that did not work."""
    try:
        with logs.bind(tenant=ref.key):
            step.on_permanent(ref, err)
    except TemporaryError as marking:
        return _error(503, f"{err} (and marking the tenant Failed failed: {marking})", 5)
    except TenantGone:
        return None
    except PermanentError as marking:  # e.g. 403: the dead-letter sink gets the 422 and tries
        log.error("could not mark the tenant Failed", extra={"error": str(marking)})
    except Exception:
        log.exception("unexpected failure while marking the tenant Failed")
        return _error(500, f"{err} (and marking the tenant Failed failed; see the function's logs)")
    return None


def _run(step: Step, event: BaseCloudEvent, ref: TenantRef) -> BaseCloudEvent | None:
    if step.handle is None:
        raise AssertionError(f"step {step.name} has neither handle nor tick")
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return step.handle(event, ref)
        except Conflict:
            if attempt == CONFLICT_ATTEMPTS:
                raise
            log.info("conflict on write; re-reading and deciding again", extra={"attempt": attempt})
    raise AssertionError("unreachable")
