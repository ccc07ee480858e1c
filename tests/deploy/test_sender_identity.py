"""Sender identity in the manifests: the Triggers, the functions' settings and the Broker's
EventPolicy agree, so that with Knative's authentication-oidc each function accepts exactly the
broker's deliveries meant for it (shared/delivery/senders.py) and the Broker only our own senders.

The subjects are Knative's names for a Trigger's identity (pkg/auth/serviceaccount.go:
kmeta.ChildName(<trigger>, "-oidc-eventing.knative.dev-trigger"), lowercased; a name over 63
characters would be hashed, so each must fit). Which component sends with which identity is in
docs/design-notes.md; the e2e suite shows it on Knative's real broker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.settings import Settings

from .manifests import (
    EVENTING,
    FUNCTION_MODULES,
    RECEIVERS,
    SERVICES,
    TRIGGERS,
    WATCH,
    WITHOUT_SENDER_IDENTITY,
    documents,
    file_documents,
    objects_of,
    render_prod_with,
)

NAMESPACE = "kubeopera-system"
DEAD_LETTER = "tenant-dead-letter"


def identity(name: str, group: str, kind: str) -> str:
    """Knative's OIDC identity of an object of eventing/ (kmeta.ChildName, lowercased), as a subject."""
    account = f"{name}-oidc-{group}-{kind}".lower()
    assert len(account) <= 63, f"Knative would hash {account}; SENDER_SUBJECTS and the EventPolicy could not name it"
    return f"system:serviceaccount:{NAMESPACE}:{account}"


def trigger_identity(trigger: str) -> str:
    return identity(trigger, "eventing.knative.dev", "Trigger")


def triggers() -> dict[str, dict[str, Any]]:
    return {p.stem: file_documents(p)[0] for p in sorted(TRIGGERS.glob("*.yaml"))}


def env(service: str) -> dict[str, str]:
    (doc,) = file_documents(SERVICES / f"{service}.yaml")
    container = doc["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def broker_dead_letter_audience() -> str | None:
    (broker,) = file_documents(EVENTING / "broker.yaml")
    sink = broker["spec"]["delivery"]["deadLetterSink"]
    assert sink["ref"]["name"] == DEAD_LETTER
    return sink.get("audience")


def expected_senders() -> dict[str, set[str]]:
    """Service -> the Trigger identities that deliver to it: as subscriber, and as dead-letter
    sink (the Trigger's own, or the Broker's for a Trigger without one; the filter sends both
    with the Trigger's identity)."""
    senders: dict[str, set[str]] = {name: set() for name in RECEIVERS}
    for name, trigger in triggers().items():
        spec = trigger["spec"]
        senders[spec["subscriber"]["ref"]["name"]].add(trigger_identity(name))
        sink = spec.get("delivery", {}).get("deadLetterSink", {"ref": {"name": DEAD_LETTER}})
        senders[sink["ref"]["name"]].add(trigger_identity(name))
    return senders


@pytest.mark.parametrize("name", sorted(triggers()))
def test_each_trigger_names_the_audience_its_service_expects(name: str) -> None:
    spec = triggers()[name]["spec"]
    subscriber = spec["subscriber"]
    assert subscriber["audience"] == env(subscriber["ref"]["name"])["SENDER_AUDIENCE"]
    sink = spec.get("delivery", {}).get("deadLetterSink")
    if sink is not None:
        assert sink["audience"] == env(sink["ref"]["name"])["SENDER_AUDIENCE"]


def test_the_brokers_dead_letter_sink_has_the_audience_too() -> None:
    assert broker_dead_letter_audience() == env(DEAD_LETTER)["SENDER_AUDIENCE"]


@pytest.mark.parametrize("service", sorted(RECEIVERS))
def test_each_function_admits_exactly_the_triggers_that_deliver_to_it(service: str) -> None:
    settings = Settings.from_env(env(service) | {"SENDER_IDENTITY": "oidc"})
    assert settings.verify_senders
    assert settings.sender_audience == service
    assert settings.sender_subjects == expected_senders()[service]


def test_functions_check_senders_by_default() -> None:
    """No Service turns it off: SENDER_IDENTITY=off comes only from the opt-out component."""
    for service in FUNCTION_MODULES:
        assert "SENDER_IDENTITY" not in env(service)


def test_the_broker_admits_our_sources_and_the_triggers_replies_only() -> None:
    """By exact subject, each computed here from the objects of eventing/ (a renamed source or
    Trigger fails this), and not by ref, which would keep the Broker from ever being Ready
    (eventing/broker-eventpolicy.yaml says why)."""
    (policy,) = file_documents(EVENTING / "broker-eventpolicy.yaml")
    assert policy["spec"]["to"] == [
        {"ref": {"apiVersion": "eventing.knative.dev/v1", "kind": "Broker", "name": "default"}}
    ]
    assert all(set(f) == {"sub"} and "*" not in f["sub"] for f in policy["spec"]["from"]), "exact subjects only"
    subjects = [f["sub"] for f in policy["spec"]["from"]]
    sources = {
        (doc["kind"], doc["metadata"]["name"])
        for path in EVENTING.glob("*.yaml")
        for doc in file_documents(path)
        if doc and doc["apiVersion"].startswith("sources.knative.dev/")
    }
    assert sources == {
        ("ApiServerSource", "tenant-source"),
        ("PingSource", "tenant-resync"),
        ("SinkBinding", "tenant-resync"),
        ("SinkBinding", "tenant-vcluster-watch"),
    }
    expected = {identity(name, "sources.knative.dev", kind) for kind, name in sources}
    expected |= {trigger_identity(name) for name in triggers()}
    assert len(subjects) == len(set(subjects)) and set(subjects) == expected


def test_without_sender_identity_component_turns_it_off_everywhere(kubectl: Path, tmp_path: Path) -> None:
    rendered = documents(render_prod_with(kubectl, tmp_path / "overlay", WITHOUT_SENDER_IDENTITY))
    services = objects_of(rendered, "Service")
    assert set(services) == set(FUNCTION_MODULES)
    for name, service in services.items():
        if name == WATCH:  # nothing is delivered to it: it checks no sender, on or off
            continue
        environ = {e["name"]: e.get("value", "") for e in service["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert environ["SENDER_IDENTITY"] == "off", name
        assert not Settings.from_env(environ | {"KUBEOPERA_API_BASE_URL": "http://x:1"}).verify_senders
