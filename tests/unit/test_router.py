"""The router and the lifecycle table it decides with (``functions.router``, ``shared.model.lifecycle``).

Every phase and condition a Tenant change can show, and what the router sends for it; then a
Tenant's whole life through the real functions on the unit fakes, every write of theirs echoed
back as the ApiServerSource would: the router sends install exactly once for a new Tenant, cleanup
exactly once for its deletion, and nothing for the pipeline's own writes.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.v1.event import CloudEvent

from functions import check_ready, cleanup, dead_letter, install, notify_api, router, store_kubeconfig
from shared.delivery import events
from shared.errors import BadEvent
from shared.model import event_types, lifecycle
from shared.model.tenant import FINALIZER, Phase, Tenant

from .fakes import (
    TENANT_NAMESPACE,
    FakeHelm,
    FakeKube,
    FakeKubeoperaApi,
    apiserver_event,
    deliver,
    fake_runtime,
    ref_of,
    tenant_object,
)

CS = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"
CONFIG = b"apiVersion: v1\nkind: Config\n"
NOW = "2026-12-02T12:00:00Z"
ADD, UPDATE, DELETE = event_types.APISERVER_ADD, event_types.APISERVER_UPDATE, event_types.APISERVER_DELETE
PROJECT = Path(__file__).resolve().parents[2]


def condition(type_: str, status: str, reason: str, generation: int = 1) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "", "observedGeneration": generation}


INSTALLED = condition("ReleaseInstalled", "True", "Installed")
READY = condition("Ready", "True", "VClusterReady")


def tenant(
    status: dict[str, Any] | None,
    *,
    generation: int = 1,
    finalizer: bool = True,
    deleting: bool = False,
) -> dict[str, Any]:
    obj = tenant_object("bob", CS, status=status, finalizers=[FINALIZER] if finalizer else None)
    obj["metadata"]["generation"] = generation
    if deleting:
        obj["metadata"]["deletionTimestamp"] = NOW
    return obj


def settled(phase: str, *extra: dict[str, Any], observed: int = 1) -> dict[str, Any]:
    return {"phase": phase, "observedGeneration": observed, "lastSyncedAt": NOW, "conditions": [INSTALLED, *extra]}


def failed(reason: str) -> dict[str, Any]:
    return {"phase": "Failed", "lastSyncedAt": NOW, "conditions": [condition("Ready", "False", reason)]}


def retried(reason: str) -> dict[str, Any]:
    """A Failed Tenant patched back to Pending by hand: the condition its failure wrote stays."""
    return failed(reason) | {"phase": "Pending"}


def marked_retry(reason: str) -> dict[str, Any]:
    """A Pending retry with its mark: ``kubeopera-tenants retry``'s (RetryRequested) or install's
    when it saw a retry by hand (RetryAccepted)."""
    return {"phase": "Pending", "lastSyncedAt": NOW, "conditions": [condition("Ready", "False", reason)]}


ROWS = [
    # (object, event type, what the router sends)
    pytest.param(tenant(None, finalizer=False), ADD, event_types.INSTALL, id="new"),
    # a new Tenant as the API server returns it: Pending, the CRD's default, written by no one
    pytest.param(tenant({"phase": "Pending"}, finalizer=False), ADD, event_types.INSTALL, id="new-as-defaulted"),
    # install's first write, the finalizer (before this version: a Pending with a time, then that)
    pytest.param(
        tenant({"phase": "Pending", "lastSyncedAt": NOW}, finalizer=False), UPDATE, None, id="install-first-sight"
    ),
    pytest.param(tenant({"phase": "Pending"}), UPDATE, None, id="install-added-the-finalizer"),
    # the same object created so (restored from a backup, our finalizer on): no step wrote it
    pytest.param(tenant({"phase": "Pending"}), ADD, event_types.INSTALL, id="restored-with-our-finalizer"),
    # the source listing every Tenant again after a restart: the settled ones are no work
    pytest.param(tenant(settled("Ready", READY)), ADD, None, id="listed-again-ready"),
    pytest.param(tenant(settled("Provisioning")), ADD, None, id="listed-again-provisioning"),
    pytest.param(tenant(failed("ProvisionTimeout")), ADD, None, id="listed-again-failed"),
    pytest.param(tenant({"phase": "Pending"}, generation=2), UPDATE, event_types.INSTALL, id="edited-while-first-seen"),
    pytest.param(tenant(settled("Provisioning")), UPDATE, None, id="provisioning"),
    pytest.param(tenant(settled("Ready", READY)), UPDATE, None, id="ready"),
    pytest.param(tenant(settled("Ready", READY), generation=2), UPDATE, event_types.INSTALL, id="new-gen"),
    pytest.param(tenant(settled("Provisioning"), generation=2), UPDATE, event_types.INSTALL, id="gen-mid"),
    pytest.param(tenant(settled("Ready", READY), finalizer=False), UPDATE, event_types.INSTALL, id="legacy"),
    pytest.param(
        tenant({"phase": "Provisioning", "observedGeneration": 1, "conditions": [READY]}),
        UPDATE,
        event_types.INSTALL,
        id="provisioning-without-its-release",
    ),
    pytest.param(tenant(failed("ProvisionTimeout")), UPDATE, None, id="failed"),
    pytest.param(tenant(retried("ProvisionTimeout")), UPDATE, event_types.INSTALL, id="retried"),
    pytest.param(tenant(marked_retry("RetryRequested")), UPDATE, event_types.INSTALL, id="retried-by-the-cli"),
    pytest.param(tenant(marked_retry("RetryAccepted")), UPDATE, None, id="install-accepted-the-retry"),
    pytest.param(tenant({"phase": "Pending", "conditions": [READY]}), UPDATE, event_types.INSTALL, id="resync-pending"),
    pytest.param(tenant(settled("Ready", READY), deleting=True), UPDATE, event_types.CLEANUP, id="deleted"),
    pytest.param(tenant(None, deleting=True), UPDATE, event_types.CLEANUP, id="deleted-before-install"),
    pytest.param(
        tenant(failed("ProvisionTimeout"), deleting=True), UPDATE, event_types.CLEANUP, id="failed-deleted"
    ),  # fmt: skip
    pytest.param(tenant({"phase": "Deleting"}, deleting=True), UPDATE, None, id="cleanup-running"),
    pytest.param(tenant(failed("CleanupFailed"), deleting=True), UPDATE, None, id="cleanup-gave-up"),
    pytest.param(
        tenant(retried("CleanupFailed"), deleting=True), UPDATE, event_types.CLEANUP, id="cleanup-retried"
    ),  # fmt: skip
    pytest.param(
        tenant(settled("Ready", READY), finalizer=False, deleting=True),
        UPDATE,
        None,
        id="deleted-without-our-finalizer",
    ),  # fmt: skip
    pytest.param(tenant({"phase": "Deleting"}, finalizer=False, deleting=True), DELETE, None, id="gone"),  # fmt: skip
]


@pytest.mark.parametrize(("obj", "event_type", "expected"), ROWS)
def test_the_router_sends_what_the_change_needs(obj: dict[str, Any], event_type: str, expected: str | None) -> None:
    event = apiserver_event(obj, event_type)
    sent = router.route(event, events.tenant_ref(event))
    assert (sent.get_type() if sent else None) == expected
    if sent is not None:
        assert sent.get_source() == f"{events.SOURCE_PREFIX}router"
        assert events.tenant_ref(sent) == ref_of(obj), "the step re-reads exactly this Tenant at this generation"


@pytest.mark.parametrize(("obj", "event_type", "expected"), ROWS)
def test_resync_and_the_steps_agree_with_the_router(obj: dict[str, Any], event_type: str, expected: str | None) -> None:
    """One rule: what the router sends is the work install or cleanup then does (they re-read the
    same object), and resync re-drives the same step for a Tenant left in that state."""
    subject = Tenant.from_object(obj)
    if event_type == DELETE:
        return  # the object of a delete event no longer exists: nothing reads it again
    if expected == event_types.INSTALL:
        assert lifecycle.install_skip_reason(subject) is None
    if expected == event_types.CLEANUP:
        assert lifecycle.wants_cleanup(subject)
    if expected is None and not lifecycle.accepted_by_install(subject):
        assert not lifecycle.wants_install(subject)


def test_an_object_that_is_no_tenant_goes_to_install_which_reads_the_live_one() -> None:
    obj = tenant(None)
    del obj["spec"]["userID"]
    event = apiserver_event(obj, ADD)
    sent = router.route(event, events.tenant_ref(event))
    assert sent is not None and sent.get_type() == event_types.INSTALL


@pytest.mark.parametrize("kind", ["StatefulSet", "Pod"])
def test_any_other_kind_is_refused(kind: str) -> None:
    """Tenants only: a vCluster's StatefulSet changes reach check-ready from the vCluster watch
    (functions.vcluster_watch), never through the router."""
    obj = tenant(None) | {"kind": kind}
    with pytest.raises(BadEvent, match=f"about a '{kind}'"):
        events.tenant_ref(apiserver_event(obj, UPDATE))


def test_every_event_type_goes_to_exactly_one_step_and_each_reply_to_one_that_takes_it() -> None:
    takers = [t for step in lifecycle.STEPS for t in step.accepts]
    assert len(takers) == len(set(takers))
    for step in lifecycle.STEPS:
        for reply in step.replies:
            assert reply in lifecycle.STEP_FOR_TYPE, f"{step.function} replies {reply}, which no step takes"
        if step.redrive is not None:
            assert lifecycle.STEP_FOR_TYPE[step.redrive] == step, f"{step.function}'s re-drive goes elsewhere"
        assert step.polls == (step.redrive in step.replies), f"{step.function}: a polling step renews its own event"


def test_every_step_has_its_function_module_service_account_and_trigger() -> None:
    for step in lifecycle.STEPS:
        module = step.function.removeprefix("tenant-").replace("-", "_")
        assert (PROJECT / "functions" / f"{module}.py").is_file(), step.function
        assert (PROJECT / "deploy" / "base" / "services" / f"{step.function}.yaml").is_file(), step.function
        assert (PROJECT / "deploy" / "base" / "rbac" / f"{step.function}.yaml").is_file(), step.function
        assert (PROJECT / "eventing" / "triggers" / f"{step.function}.yaml").is_file(), step.function


# A Tenant's whole life, each of the pipeline's writes echoed back -------------------------------


def answered(response: Any) -> BaseCloudEvent | None:
    assert response.status_code in (200, 204), response.json
    return events.parse(dict(response.headers), response.data) if response.status_code == 200 else None


def test_a_tenants_life_sends_install_once_and_cleanup_once(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    runtime = fake_runtime(kube, helm, api)
    apps = {
        event_types.INSTALL: install.create_app(runtime),
        event_types.PROVISIONING: check_ready.create_app(runtime),
        event_types.READY: store_kubeconfig.create_app(runtime),
        event_types.KUBECONFIG_STORED: notify_api.create_app(runtime),
        event_types.CLEANUP: cleanup.create_app(runtime),
    }
    routing = router.create_app(runtime)
    routed: list[str] = []

    def route(obj: dict[str, Any], event_type: str = UPDATE) -> BaseCloudEvent | None:
        sent = answered(deliver(routing, apiserver_event(obj, event_type)))
        if sent is not None:
            routed.append(sent.get_type())
        return sent

    def run_chain(first: BaseCloudEvent) -> None:
        pending = [first]
        while pending:
            event = pending.pop(0)
            reply = answered(deliver(apps[event.get_type()], event))
            if reply is not None:
                pending.append(reply)

    added = kube.add_tenant(tenant_object("bob", CS))
    first = route(added, ADD)
    assert first is not None and first.get_type() == event_types.INSTALL
    provisioning = answered(deliver(apps[event_types.INSTALL], first))
    assert provisioning is not None
    kube.boot_vcluster("bob", CONFIG)  # it boots before check-ready's first look: the chain runs to its end
    run_chain(provisioning)
    for echo in list(kube.echoes):  # the pipeline's own writes coming back
        assert route(echo) is None, echo.get("status")
    assert kube.get_tenant(TENANT_NAMESPACE, "bob").status.phase == "Ready"  # type: ignore[union-attr]
    assert routed == [event_types.INSTALL]

    kube.echoes.clear()
    deleting = kube.delete_tenant(TENANT_NAMESPACE, "bob")
    assert deleting is not None
    cleanup_event = route(deleting)
    assert cleanup_event is not None
    assert deliver(apps[event_types.CLEANUP], cleanup_event).status_code == 503  # the namespace is terminating
    kube.finish_namespace_deletion("vcluster-bob")
    run_chain(cleanup_event)  # the broker's re-delivery
    for echo in list(kube.echoes):
        assert route(echo) is None, echo.get("status")
    assert kube.tenant_dict(TENANT_NAMESPACE, "bob") is None
    assert routed == [event_types.INSTALL, event_types.CLEANUP]


def test_the_routers_dead_letter_fails_no_tenant(kube: FakeKube, helm: FakeHelm) -> None:
    obj = kube.add_tenant(tenant_object("bob", CS, status={"phase": "Pending"}))
    event = apiserver_event(obj, ADD)
    attributes = event.get_attributes() | {
        "knativeerrordest": f"http://tenant-router.{TENANT_NAMESPACE}.svc.cluster.local",
        "knativeerrorcode": "503",
    }
    app = dead_letter.create_app(fake_runtime(kube, helm, FakeKubeoperaApi()))
    response = deliver(app, CloudEvent(attributes, obj))
    assert response.status_code == 204
    assert kube.journal == []


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(failed("ProvisionTimeout"), NOW, id="failed"),
        pytest.param(retried("ProvisionTimeout"), NOW, id="retried"),
        pytest.param({"phase": "Pending"}, None, id="first-sight"),
        pytest.param(settled("Provisioning", condition("Ready", "False", "Provisioning")), None, id="provisioning"),
        pytest.param(
            settled("Provisioning", condition("Ready", "False", "VClusterNotServing")),
            None,
            id="not-serving-yet",
        ),
        pytest.param(failed("ProvisionTimeout") | {"phase": "Deleting"}, None, id="deleting-since"),
        pytest.param(marked_retry("RetryRequested"), NOW, id="retry-requested"),
        pytest.param(marked_retry("RetryAccepted"), NOW, id="retry-accepted"),
    ],
)
def test_failed_since_dates_only_a_failure_that_still_stands(status: dict[str, Any], expected: str | None) -> None:
    since = lifecycle.failed_since(Tenant.from_object(tenant(status)))
    assert (since.strftime("%Y-%m-%dT%H:%M:%SZ") if since else None) == expected


LATER = "2026-12-02T12:20:00Z"  # 1,200 s after NOW: past the default PROVISION_TIMEOUT_SECONDS (600)


@pytest.mark.parametrize(
    ("status", "started", "timed_out"),
    [
        pytest.param(None, None, False, id="no-status"),
        pytest.param({"phase": "Pending"}, None, False, id="pending-without-a-time"),
        pytest.param({"phase": "Pending", "lastSyncedAt": NOW}, NOW, True, id="marked-by-resync"),
        pytest.param({"phase": "Pending", "lastSyncedAt": NOW, "conditions": [READY]}, NOW, True, id="resync-pending"),
        pytest.param(retried("ProvisionTimeout"), None, False, id="retried-by-hand-not-yet-seen"),
        pytest.param(marked_retry("RetryRequested"), NOW, True, id="retried-by-the-cli"),
        pytest.param(marked_retry("RetryAccepted"), NOW, True, id="retry-accepted"),
        pytest.param(settled("Provisioning"), NOW, True, id="provisioning"),
        pytest.param(settled("Ready", READY), None, False, id="ready"),
        pytest.param(failed("ProvisionTimeout"), None, False, id="failed"),
    ],
)
def test_pending_counts_toward_the_provision_timeout_from_a_time_install_or_a_retry_wrote(
    status: dict[str, Any] | None, started: str | None, timed_out: bool
) -> None:
    """A Pending Tenant's clock starts at a write that means "install was asked": install's first
    sight, a retry's mark, resync's re-install; never at a failure's time that a retry by hand kept
    (install marks that one when it sees it), so a retry is never Failed at once for its past."""
    subject = Tenant.from_object(tenant(status))
    since = lifecycle.provision_started(subject)
    assert (since.strftime("%Y-%m-%dT%H:%M:%SZ") if since else None) == started
    later = datetime.fromisoformat(LATER)
    assert (lifecycle.timed_out(subject, later, 600) is not None) == timed_out
    assert lifecycle.timed_out(subject, datetime.fromisoformat(NOW), 600) is None


def test_a_pending_timeout_says_install_never_got_there() -> None:
    assert lifecycle.timeout_message(1200, 600, "last: x", Phase.PENDING) == (
        "still Pending 1200s after install was asked for it (PROVISION_TIMEOUT_SECONDS=600): last: x"
    )
    assert lifecycle.timeout_message(700, 600, "waiting").startswith("vCluster not ready 700s after provisioning began")
