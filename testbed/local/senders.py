"""Sender identity in the local stack: who Knative's broker says sent each delivery, and what each
function is told to expect (``SENDER_IDENTITY``, ``SENDER_AUDIENCE``, ``SENDER_SUBJECTS``).

With ``authentication-oidc`` (on by default: ``StackOptions.sender_identity``) the broker's filter
attaches to every delivery a token for the Trigger's own identity with the subscriber's audience,
and to a dead letter one for the same identity with the dead-letter sink's audience
(:mod:`testbed.knative.oidc` has each hop). Knative Serving publishes no audience for a Service,
so the audience is the Trigger's: ``spec.subscriber.audience`` and
``spec.delivery.deadLetterSink.audience`` (the Broker's for a Trigger without a delivery).

**The audience convention is** :func:`audience` **: the Knative Service's name** (``tenant-install``),
the one ``eventing/`` uses. Where ``deploy/base`` gives a Trigger or the Broker no audience, the
stack adds that one (:func:`with_audiences`) so every delivery carries a token.

What each function gets (:func:`plan`):

- ``SENDER_AUDIENCE``: the audience of the Triggers that deliver to it (one per function);
- ``SENDER_SUBJECTS``: ``system:serviceaccount:<ns>:<trigger>-oidc-eventing.knative.dev-trigger``
  of each Trigger whose filter sends to it: as subscriber, or as dead-letter sink (a Trigger with
  its own dead-letter sink, or with no delivery and the Broker's). The names are Knative's
  (``pkg/auth/serviceaccount.go``, ported in :func:`testbed.knative.oidc.identity_name`), known
  before the Triggers are Ready; :func:`check_published` compares them with each Trigger's
  ``status.auth.serviceAccountName`` once they are. Not included: a Trigger with a ``delivery``
  but no dead-letter sink while the Broker has one; its failed events reach the Broker's sink from
  the channel dispatcher with the Trigger's *Subscription* identity, named after the Trigger's UID
  (no manifest can list it): :func:`plan` names such Triggers in ``unlisted``.

When a Knative Service of ``deploy/base`` declares ``SENDER_AUDIENCE`` / ``SENDER_SUBJECTS``
itself, they must agree with the plan (same audience; every planned subject listed), else the
stack does not start (:class:`~testbed.local.errors.StackError`): a function that refuses its own
broker is the product's bug, found here before any Tenant.

A SinkBinding's part (its reconciler runs in Knative's webhook, which does not run here) is done
by :func:`bind_sink_identity`: the identity Knative would make, published in the SinkBinding's
``status.auth`` (the Broker's EventPolicy resolves it there), and a token of it for the Broker's
audience in a file, the subject's ``SINK_TOKEN_FILE`` (the SinkBinding mounts it at
``/oidc/token``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed import controlplane as cp_mod
from testbed.knative import oidc
from testbed.knative.kubectl import kubectl
from testbed.local.errors import StackError
from testbed.toolchain import Toolchain

SERVING = "serving.knative.dev/v1"
TOKEN_DURATION = "24h"  # Knative's own are 1 h and renewed; one local run is shorter than this


def audience(service: str) -> str:
    """The audience of the tokens the broker sends to a Knative Service: its name."""
    return service


def _service_of(destination: Mapping[str, Any] | None) -> str | None:
    ref = (destination or {}).get("ref") or {}
    return ref.get("name") if (ref.get("apiVersion"), ref.get("kind")) == (SERVING, "Service") else None


def _with_audience(destination: dict[str, Any]) -> None:
    service = _service_of(destination)
    if service is not None and not destination.get("audience"):
        destination["audience"] = audience(service)


def with_audiences(manifests: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifests with an audience (:func:`audience`) on every Trigger's subscriber and dead-letter
    sink and on the Broker's dead-letter sink that is a Knative Service and has none."""
    docs = [json.loads(json.dumps(doc)) for doc in manifests]
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc.get("kind") == "Trigger" and spec.get("subscriber"):
            _with_audience(spec["subscriber"])
        if doc.get("kind") in ("Trigger", "Broker") and (spec.get("delivery") or {}).get("deadLetterSink"):
            _with_audience(spec["delivery"]["deadLetterSink"])
    return docs


def without_event_policies(manifests: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Without the feature Knative's webhook refuses an EventPolicy, and one that is there keeps the
    Broker from Ready: dropped, as ``deploy/components/without-sender-identity`` does."""
    return [doc for doc in manifests if doc.get("kind") != "EventPolicy"]


def waits_for_triggers(doc: Mapping[str, Any]) -> bool:
    """An EventPolicy that admits Triggers by ``from[].ref`` cannot be Ready before they publish their
    identity, and in Knative v0.48 a Trigger publishes it (``status.auth``) only once its Broker is
    Ready (pkg/reconciler/broker/trigger/trigger.go: it returns at ``!b.IsReady()`` before
    ``SetupOIDCServiceAccount``), while a Broker with an un-Ready EventPolicy is not Ready
    (``EventPoliciesReady``): applied together with its Triggers such a policy never becomes Ready,
    in a cluster as here. The stack refuses to start with one (:func:`testbed.local.stack.start_stack`);
    ``eventing/broker-eventpolicy.yaml`` names the Triggers' identities by ``sub`` instead."""
    return doc.get("kind") == "EventPolicy" and any(
        (entry.get("ref") or {}).get("kind") == "Trigger" for entry in (doc.get("spec") or {}).get("from") or []
    )


@dataclass(frozen=True)
class TriggerIdentity:
    """What the broker's filter sends for one Trigger: its identity and the audiences it uses."""

    trigger: str
    service_account: str
    subscriber_audience: str | None
    dead_letter_audience: str | None


@dataclass(frozen=True)
class Plan:
    """Per function, what to expect; per Trigger, what Knative should publish."""

    namespace: str
    env: Mapping[str, Mapping[str, str]]  # Knative Service -> SENDER_* for its process
    triggers: Mapping[str, TriggerIdentity] = field(default_factory=dict)
    unlisted: tuple[str, ...] = ()  # Triggers whose dead letters come with their Subscription's identity


def plan(
    manifests: Iterable[Mapping[str, Any]], namespace: str, broker: str, functions: Iterable[str], enabled: bool
) -> Plan:
    """``SENDER_*`` for each function from the Triggers of ``broker`` (see the module doc)."""
    if not enabled:
        return Plan(namespace, {service: {"SENDER_IDENTITY": "off"} for service in functions})
    docs = list(manifests)
    broker_doc = next(d for d in docs if d["kind"] == "Broker" and d["metadata"]["name"] == broker)
    broker_sink = (broker_doc["spec"].get("delivery") or {}).get("deadLetterSink")
    audiences: dict[str, set[str]] = {}
    subjects: dict[str, set[str]] = {service: set() for service in functions}
    identities: dict[str, TriggerIdentity] = {}
    unlisted: list[str] = []

    def receives(service: str | None, aud: str | None, who: str) -> None:
        if service is None or service not in subjects:
            return
        if not aud:
            raise StackError(f"{service} receives from Trigger {who} without an audience: no token would be sent")
        audiences.setdefault(service, set()).add(aud)
        subjects[service].add(oidc.subject(namespace, oidc.trigger_identity(who)))

    for doc in docs:
        if doc["kind"] != "Trigger" or doc["spec"].get("broker") != broker:
            continue
        name, spec = doc["metadata"]["name"], doc["spec"]
        subscriber = spec["subscriber"]
        receives(_service_of(subscriber), subscriber.get("audience"), name)
        delivery = spec.get("delivery")
        sink = (delivery or {}).get("deadLetterSink") if delivery is not None else broker_sink
        if sink is not None:
            receives(_service_of(sink), sink.get("audience"), name)
        elif delivery is not None and broker_sink is not None:
            unlisted.append(name)
        identities[name] = TriggerIdentity(
            name,
            oidc.trigger_identity(name),
            subscriber.get("audience"),
            (sink or broker_sink or {}).get("audience"),
        )

    env: dict[str, dict[str, str]] = {}
    expecting = _expecting_deliveries(docs)
    for service, allowed in subjects.items():
        if not allowed and service not in expecting:
            continue  # nothing is delivered to it (the vCluster watch): it checks no sender
        if not allowed:
            raise StackError(f"no Trigger of Broker {broker} delivers to {service}: nothing could be allowed to")
        if len(audiences[service]) != 1:
            raise StackError(f"the Triggers deliver to {service} with audiences {sorted(audiences[service])}: one only")
        env[service] = {
            "SENDER_IDENTITY": "oidc",
            "SENDER_AUDIENCE": audiences[service].pop(),
            "SENDER_SUBJECTS": ",".join(sorted(allowed)),
        }
    return Plan(namespace, env, identities, tuple(unlisted))


def _expecting_deliveries(docs: Iterable[Mapping[str, Any]]) -> set[str]:
    """The Knative Services that declare SENDER_AUDIENCE: the broker must deliver to them."""
    found = set()
    for doc in docs:
        if (doc.get("apiVersion"), doc.get("kind")) == (SERVING, "Service"):
            env = doc["spec"]["template"]["spec"]["containers"][0].get("env") or []
            if any(e["name"] == "SENDER_AUDIENCE" for e in env):
                found.add(doc["metadata"]["name"])
    return found


def check_declared(manifests: Iterable[Mapping[str, Any]], sender_plan: Plan) -> None:
    """A Knative Service that declares SENDER_AUDIENCE / SENDER_SUBJECTS agrees with the plan."""
    problems = []
    for doc in manifests:
        if (doc.get("apiVersion"), doc.get("kind")) != (SERVING, "Service"):
            continue
        service = doc["metadata"]["name"]
        planned = sender_plan.env.get(service)
        containers = doc["spec"]["template"]["spec"]["containers"]
        declared = {e["name"]: e.get("value", "") for e in containers[0].get("env") or []}
        if planned is None or planned["SENDER_IDENTITY"] == "off":
            continue
        if declared.get("SENDER_IDENTITY", "oidc") == "off":
            problems.append(f"{service}: SENDER_IDENTITY=off, while the broker sends tokens")
            continue
        if "SENDER_AUDIENCE" in declared and declared["SENDER_AUDIENCE"] != planned["SENDER_AUDIENCE"]:
            problems.append(
                f"{service}: SENDER_AUDIENCE={declared['SENDER_AUDIENCE']}, "
                f"the broker's tokens carry {planned['SENDER_AUDIENCE']}"
            )
        if "SENDER_SUBJECTS" in declared:
            missing = set(planned["SENDER_SUBJECTS"].split(",")) - {
                s.strip() for s in declared["SENDER_SUBJECTS"].split(",")
            }
            if missing:
                problems.append(f"{service}: SENDER_SUBJECTS lacks {sorted(missing)}, who deliver to it")
    if problems:
        raise StackError("deploy/base would refuse its own broker's deliveries:\n  " + "\n  ".join(problems))


def check_published(triggers: Mapping[str, Mapping[str, Any]], sender_plan: Plan) -> None:
    """Each Ready Trigger publishes the identity and audiences the plan gave its functions."""
    problems = []
    for name, expected in sender_plan.triggers.items():
        status = triggers[name].get("status") or {}
        published = (
            oidc.published_identity(triggers[name]),
            status.get("subscriberAudience"),
            status.get("deadLetterSinkAudience"),
        )
        wanted = (expected.service_account, expected.subscriber_audience, expected.dead_letter_audience)
        if published != wanted:
            problems.append(f"Trigger {name}: (identity, audience, dead-letter audience) {published}, not {wanted}")
    if problems:
        raise StackError("Knative's Triggers are not what the functions expect:\n  " + "\n  ".join(problems))


def bind_sink_identity(
    tools: Toolchain,
    control_plane: cp_mod.ControlPlane,
    binding: Mapping[str, Any],
    sink_audience: str,
    folder: Path,
) -> Path:
    """A SinkBinding's OIDC part, as its reconciler does it (pkg/reconciler/sinkbinding/
    sinkbinding.go): its identity (a ServiceAccount it owns) published in ``status.auth``, and a
    token of it for ``sink_audience`` in a file; returns the file (the subject's ``SINK_TOKEN_FILE``)."""
    admin = control_plane.admin_kubeconfig
    namespace, name = binding["metadata"]["namespace"], binding["metadata"]["name"]
    uid = kubectl(tools, admin, "get", "sinkbinding", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}")
    account = oidc.identity_name("sources.knative.dev", "SinkBinding", name)
    service_account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": account,
            "namespace": namespace,
            "labels": {"eventing.knative.dev/oidc": "enabled"},
            "annotations": {"description": f'Service Account for OIDC Authentication for SinkBinding "{name}"'},
            "ownerReferences": [
                {
                    "apiVersion": "sources.knative.dev/v1",
                    "kind": "SinkBinding",
                    "name": name,
                    "uid": uid.strip(),
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
    }
    kubectl(tools, admin, "apply", "-f", "-", input=json.dumps(service_account))
    status = {"status": {"auth": {"serviceAccountName": account}, "sinkAudience": sink_audience}}
    kubectl(
        tools, admin, "patch", "sinkbinding", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    token = cp_mod.request_token(control_plane, namespace, account, duration=TOKEN_DURATION, audiences=[sink_audience])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{namespace}.{name}.sinkbinding-token"
    path.write_text(token)
    path.chmod(0o600)
    return path
