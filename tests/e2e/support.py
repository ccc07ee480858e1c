"""What the end-to-end tests share: waiting, Tenant manifests, kubectl and helm as a person runs
them, and reading a Tenant's phase and Events."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any, TypeVar

import yaml

from shared.adapters.kube import Kube
from shared.delivery import events
from shared.model import lifecycle
from shared.model.tenant import Tenant, TenantRef, rfc3339
from testbed.knative.broker_watch import Delivery
from testbed.local.stack import TENANT_NAMESPACE, Stack
from testbed.processes import run

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 120.0, interval: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def announced(pipeline: Stack, name: str, since: float, timeout: float = 30.0) -> None:
    """Wait until notify-api's delivery for Tenant ``name`` that began after ``since`` (time.time())
    was answered with success: the Tenant is Ready inside that delivery, and its Ready Event and
    the delivery's record come only after it."""

    def done(deliveries: list[Delivery]) -> bool:
        return any(
            d.service == "tenant-notify-api"
            and d.target == "subscriber"
            and (d.subject or "").endswith(f"/{name}")
            and d.time >= since
            and 200 <= d.status < 300
            for d in deliveries
        )

    assert pipeline.watch.wait_for(done, timeout), f"notify-api's delivery for {name} not answered in {timeout:.0f}s"


def ready_and_announced(kube: Kube, pipeline: Stack, name: str, since: float, timeout: float = 90.0) -> Tenant:
    """Wait for ``name`` Ready and notify-api's delivery that made it so answered (:func:`announced`)."""
    tenant = wait_for(f"{name} Ready", lambda: phase_of(kube, name, "Ready"), timeout=timeout)
    announced(pipeline, name, since)
    return tenant


def tenant_yaml(
    name: str,
    cloud_space_id: str,
    tenant_name: str | None = None,
    cpu: str = "1",
    memory: str = "2Gi",
    user: str = "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "kubeopera.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": name, "namespace": TENANT_NAMESPACE},
            "spec": {
                "userID": user,
                "tenantName": tenant_name or name,
                "cloudSpaceID": cloud_space_id,
                "quota": {"cpu": cpu, "memory": memory},
            },
        }
    )


def phase_of(kube: Kube, name: str, phase: str) -> Tenant | None:
    tenant = kube.get_tenant(TENANT_NAMESPACE, name)
    if tenant is not None and tenant.status.phase.value == phase:
        return tenant
    return None


def kubectl_as(pipeline: Stack, kubeconfig: Path, *args: str, input: str | None = None) -> CompletedProcess[str]:
    """kubectl with the given identity, allowed to fail: for tests of what is refused."""
    return run([str(pipeline.tools.kubectl), f"--kubeconfig={kubeconfig}", *args], input=input, check=False)


def patch_tenant(pipeline: Stack, name: str, patch: dict[str, Any]) -> CompletedProcess[str]:
    """A merge patch of a Tenant as admin, allowed to fail."""
    return kubectl_as(
        pipeline,
        pipeline.admin_kubeconfig,
        "patch",
        "kt",
        name,
        "-n",
        TENANT_NAMESPACE,
        "--type=merge",
        "-p",
        json.dumps(patch),
    )


def helm(pipeline: Stack, *args: str, identity: str | None = None) -> Any:
    """helm as admin, or as a function's identity (``tenant-install``): only install and cleanup may
    write helm's records in vcluster-* (deploy/base/policy/tenant-helm-records.yaml)."""
    kubeconfig = pipeline.function_kubeconfigs[identity] if identity else pipeline.admin_kubeconfig
    out = run([str(pipeline.tools.helm), f"--kubeconfig={kubeconfig}", *args, "-o", "json"]).stdout
    return json.loads(out)


def exists(pipeline: Stack, *what: str) -> bool:
    """Does ``kubectl get WHAT`` find it (as admin)?"""
    return bool(pipeline.kubectl("get", *what, "--ignore-not-found", "-o", "name").strip())


def tenant_events(pipeline: Stack, name: str) -> list[dict[str, Any]]:
    """The Kubernetes Events about Tenant ``name`` (every incarnation), in the order they were
    last recorded (resourceVersion: timestamps have one-second resolution)."""
    listed = json.loads(
        pipeline.kubectl(
            "get",
            "events",
            "-n",
            TENANT_NAMESPACE,
            f"--field-selector=involvedObject.kind=Tenant,involvedObject.name={name}",
            "-o",
            "json",
        )
    )
    return sorted(listed["items"], key=lambda e: int(e["metadata"]["resourceVersion"]))


@contextmanager
def previous_install_rights(pipeline: Stack, namespace: str) -> Iterator[None]:
    """install's helm and chart rights in ``namespace`` as the version before per-namespace
    bindings held them (cluster-wide): a RoleBinding of its per-namespace ClusterRole, made as
    admin under another name than install's own, in force before this yields, deleted after."""
    name = "previous-version-install"
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "kubeopera-tenants:tenant-install:vcluster-namespace",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "tenant-install", "namespace": TENANT_NAMESPACE}],
    }
    pipeline.kubectl("apply", "-f", "-", input=json.dumps(binding))
    install = pipeline.function_kubeconfigs["tenant-install"]
    deadline = time.monotonic() + 30
    while kubectl_as(pipeline, install, "auth", "can-i", "list", "secrets", "-n", namespace).stdout.strip() != "yes":
        assert time.monotonic() < deadline, f"install's stand-in binding in {namespace} not in force"
        time.sleep(0.2)
    try:
        yield
    finally:
        pipeline.kubectl("delete", "rolebinding", name, "-n", namespace, "--ignore-not-found")


def legacy_namespace(pipeline: Stack, tenant: str, cloud_space_id: str) -> None:
    """Namespace vcluster-<tenant> labelled as the version before ownership labels made it for
    Tenant ``tenant``: its name and cloudSpaceID, no uid (install adopts it)."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": f"vcluster-{tenant}",
            "labels": {
                "kubeopera.io/tenant": tenant,
                "kubeopera.io/tenant-id": cloud_space_id,
                "kubeopera.io/managed-by": "tenant-controller",
            },
        },
    }
    pipeline.kubectl("apply", "-f", "-", input=json.dumps(namespace))


def trigger_dispatched(pipeline: Stack, trigger: str, retry: int | None = None) -> bool:
    """Whether the in-memory channel reports delivering to ``trigger``'s subscriber (with
    ``retry`` retries, when given): the Subscription's delivery copied into the channel's spec,
    the subscriber reported ready at that generation, and the channel itself Ready at its
    generation. Knative's dispatcher (v0.48.0) reports a subscriber ready even when it skipped
    the channel for not being Ready, and applies it only once it is: so this is necessary, not
    sufficient (``trigger_delivers`` proves it)."""
    channels = json.loads(pipeline.kubectl("get", "inmemorychannels", "-n", TENANT_NAMESPACE, "-o", "json"))
    for channel in channels["items"]:
        status = channel.get("status", {})
        settled = status.get("observedGeneration") == channel["metadata"]["generation"] and any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])
        )
        ready = {s["uid"]: s for s in status.get("subscribers", [])}
        for sub in channel["spec"].get("subscribers", []):
            if trigger in sub.get("subscriberUri", "") and (
                retry is None or sub.get("delivery", {}).get("retry") == retry
            ):
                seen = ready.get(sub["uid"], {})
                current = seen.get("observedGeneration") == sub.get("generation")
                return settled and current and seen.get("ready") == "True"
    return False


def trigger_delivers(pipeline: Stack, trigger: str, event_type: str, timeout: float = 60) -> None:
    """Wait until an event of ``event_type`` sent to the Broker now reaches ``trigger``'s
    subscriber: a probe about a Tenant that does not exist (the step reads it, finds nothing and
    answers 204), sent as resync sends its re-drives, again every few seconds until one arrives.
    After a Trigger's change, Knative deletes its Subscription and makes a new one; until the
    channel's dispatcher has applied the new one, an event for that Trigger goes nowhere."""
    deadline = time.monotonic() + timeout
    sent: set[str] = set()
    while time.monotonic() < deadline:
        ref = TenantRef(TENANT_NAMESPACE, f"probe-{uuid.uuid4().hex[:8]}", str(uuid.uuid4()), 1)
        pipeline.send_as("sinkbinding", "tenant-resync", *events.to_binary(events.make(event_type, "e2e-probe", ref)))
        sent.add(ref.key)
        until = min(deadline, time.monotonic() + 5)
        while time.monotonic() < until:
            if any(
                d.trigger == trigger and d.target == "subscriber" and d.subject in sent and 200 <= d.status < 300
                for d in pipeline.watch.deliveries()
            ):
                return
            time.sleep(0.2)
    raise AssertionError(f"no {event_type} probe reached {trigger}'s subscriber within {timeout:g}s")


def trigger_reconciled(pipeline: Stack, trigger: str) -> bool:
    """Whether Knative has reconciled ``trigger``'s current spec (observedGeneration) and it is Ready."""
    obj = json.loads(pipeline.kubectl("get", "trigger", trigger, "-n", TENANT_NAMESPACE, "-o", "json"))
    status = obj.get("status", {})
    ready = [c for c in status.get("conditions", []) if c.get("type") == "Ready"]
    return status.get("observedGeneration") == obj["metadata"]["generation"] and [c["status"] for c in ready] == [
        "True"
    ]


@contextmanager
def trigger_filtered_away(pipeline: Stack, trigger: str) -> Iterator[None]:
    """``trigger``'s filter changed to a type nobody sends while the block runs (its function gets
    no event: Knative drops what no Trigger takes), then set back; each waited for until Knative
    has reconciled it. The Trigger is not deleted: a Trigger made again gets a new OIDC
    ServiceAccount of the same name, and the broker's cached token of the old one is then refused
    (401) for a while, which fails Tenants of later tests."""
    saved = json.loads(pipeline.kubectl("get", "trigger", trigger, "-n", TENANT_NAMESPACE, "-o", "json"))["spec"]

    def set_filters(filters: Any) -> None:
        patch = json.dumps({"spec": {"filters": filters}})
        pipeline.kubectl("patch", "trigger", trigger, "-n", TENANT_NAMESPACE, "--type=merge", "-p", patch)
        wait_for(f"{trigger}'s filter reconciled", lambda: trigger_reconciled(pipeline, trigger), timeout=60)

    set_filters([{"exact": {"type": "io.kubeopera.tenant.nowhere"}}])
    try:
        yield
    finally:
        set_filters(saved["filters"])


def poll_quiet(kube: Kube, name: str, poll: int = 1) -> None:
    """Wait until ``name``'s poll has been quiet long enough for resync to take its chain for lost
    (``lifecycle.poll_chain_lost``): resync re-drives it only then (the status's times have
    one-second resolution, hence the second more)."""

    def quiet() -> bool:
        tenant = kube.get_tenant(TENANT_NAMESPACE, name)
        later = datetime.now(UTC) - timedelta(seconds=1)
        return tenant is not None and lifecycle.poll_chain_lost(tenant, later, poll)

    wait_for(f"{name}'s poll quiet", quiet, timeout=(lifecycle.LOST_AFTER_POLLS + 1) * poll + 30, interval=0.2)


def chain_heard_ago(pipeline: Stack, kube: Kube, name: str, seconds: float, poll: int) -> None:
    """Write ``name``'s poll chain as last heard ``seconds`` ago (``lastSyncedAt`` and
    ``lastPolledAt``, as a chain silent that long leaves them), instead of waiting that long for
    resync to take it for lost: for a chain that ended (its last reply went nowhere), so that no
    step writes those times meanwhile. Checks that resync's rule now takes it for lost."""
    then = rfc3339(datetime.now(UTC) - timedelta(seconds=seconds))
    patch = {"status": {"lastSyncedAt": then, "lastPolledAt": then}}
    pipeline.kubectl(
        "patch", "tenant", name, "-n", TENANT_NAMESPACE, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
    )
    tenant = kube.get_tenant(TENANT_NAMESPACE, name)
    assert tenant is not None and lifecycle.poll_chain_lost(tenant, datetime.now(UTC), poll), tenant


def completed_requests(pipeline: Stack, named: str = "") -> list[dict[str, Any]]:
    """The API server's audit log entries of answered requests (stage ResponseComplete), in
    order; with ``named``, only those about an object whose name starts with it."""
    assert pipeline.control_plane is not None
    entries = map(json.loads, pipeline.control_plane.audit_log.read_text().splitlines())
    return [
        e
        for e in entries
        if e.get("stage") == "ResponseComplete" and (e.get("objectRef") or {}).get("name", "").startswith(named)
    ]
