"""The whole life of a Tenant on real parts: ownership, deletion with full cleanup, Events,
Pending, the provision timeout, and RBAC with no rule that nothing uses.

The same test bed as ``test_pipeline`` (real kube-apiserver and etcd with kube-controller-manager
running the namespace and garbage-collector controllers, so a deleted namespace really goes away;
real helm and OCI registry; the real ApiServerSource adapter; every function under gunicorn with
its own ServiceAccount and the RBAC of ``deploy/``), tuned to be quick: the vCluster stand-in
boots in 3 s, check-ready polls every 2 s and gives up after 20 s, cleanup polls every second.
Releases named ``vc-stuck-*`` never boot.

Each test leaves the Tenants it made in place unless deleting them is the point, so the last
test can read the API server's audit log of the whole module and compare it with the RBAC.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from shared.adapters.kube import Kube
from shared.adapters.vcluster_api import VClusterApi
from shared.delivery import events
from shared.model import event_types
from shared.model.naming import ANNOTATION_DELETION_PROTECTION
from shared.model.tenant import FINALIZER, Tenant
from shared.steps.locks import LEASE_SECONDS
from testbed.controlplane import as_syncer
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, start_stack
from testbed.project import project_path
from testbed.toolchain import Toolchain

from .rbac_usage import SOURCES, unused_rules
from .support import (
    completed_requests,
    exists,
    helm,
    kubectl_as,
    legacy_namespace,
    phase_of,
    previous_install_rights,
    ready_and_announced,
    tenant_events,
    tenant_yaml,
    trigger_delivers,
    trigger_dispatched,
    wait_for,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

TIMEOUT_SECONDS = 20
CS_BOB = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e60"
CS_BOB_DUP = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e61"
CS_ERIN = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e62"
CS_FRANK = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e63"
CS_GINA = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e64"
CS_HAL = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e65"
CS_IVY = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e66"
CS_JO = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e67"
CS_KIM = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e68"
CS_LEE = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e69"
CS_NED = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6a"
CS_FAY = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6b"
CS_DARK = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6c"
CS_NARROW = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6d"
CS_SLOW = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6e"
CS_PAM = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6f"
CS_RAE = "0b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e70"


SLOW_HELM_SECONDS = LEASE_SECONDS + 5  # helm of release vc-slow-*: longer than the work Lease lasts


def helm_that_outlasts_the_lease(folder: Path, real: Path) -> Path:
    """helm through ``HELM_EXECUTABLE``: an upgrade of a ``vc-slow-*`` release sleeps past the
    work Lease first (before any request), then runs the real helm; anything else is the real helm."""
    script = folder / "helm-that-outlasts-the-lease"
    script.write_text(
        f'#!/bin/sh\ncase "$1 $2" in "upgrade vc-slow-"*) sleep {SLOW_HELM_SECONDS};; esac\nexec {real} "$@"\n'
    )
    script.chmod(0o755)
    return script


@pytest.fixture(scope="module")
def pipeline(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    slow = helm_that_outlasts_the_lease(tmp_path_factory.mktemp("helm"), toolchain.helm)
    options = StackOptions(
        function_env={"HELM_EXECUTABLE": str(slow)},
        api_token="lifecycle-token",
        vcluster_boot_seconds=3,
        vcluster_never_boot=r"vc-stuck-.*",
        vcluster_api_down=r"vc-dark-.*",  # boots and writes its kubeconfig; its API never answers
        vcluster_short_names=r"vc-narrow-.*",  # its certificate leaves out the .svc names
        ready_poll_seconds=2,
        provision_timeout_seconds=TIMEOUT_SECONDS,
        cleanup_poll_seconds=1,
    )
    with start_stack(options) as stack:
        yield stack


def apply(pipeline: Stack, name: str, cloud_space_id: str, tenant_name: str | None = None) -> None:
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml(name, cloud_space_id, tenant_name))


def provision(pipeline: Stack, kube: Kube, name: str, cloud_space_id: str) -> Tenant:
    since = time.time()
    apply(pipeline, name, cloud_space_id)
    return ready_and_announced(kube, pipeline, name, since)


def delete_and_wait_gone(pipeline: Stack, kube: Kube, name: str, timeout: float = 90) -> None:
    pipeline.kubectl("delete", "kt", name, "-n", TENANT_NAMESPACE, "--wait=false")
    wait_for(f"{name} gone", lambda: kube.get_tenant(TENANT_NAMESPACE, name) is None, timeout=timeout)


def settled(pipeline: Stack) -> None:
    """Wait until the broker has nothing in flight (polls included)."""
    assert pipeline.watch.wait_idle(60), "the broker still had deliveries in flight"


def snapshot(pipeline: Stack, tenant_name: str, cloud_space_id: str) -> dict[str, Any]:
    """Everything of a Tenant's that another Tenant must never change, to compare byte for byte."""
    namespace = f"vcluster-{tenant_name}"
    ns = json.loads(pipeline.kubectl("get", "namespace", namespace, "-o", "json"))
    secret = json.loads(
        pipeline.kubectl("get", "secret", f"tenant-{cloud_space_id}-kubeconfig", "-n", TENANT_NAMESPACE, "-o", "json")
    )
    statefulset = json.loads(pipeline.kubectl("get", "statefulset", f"vc-{tenant_name}", "-n", namespace, "-o", "json"))
    return {
        "helm history": helm(pipeline, "history", f"vc-{tenant_name}", "-n", namespace),
        "helm values": helm(pipeline, "get", "values", f"vc-{tenant_name}", "-n", namespace),
        "namespace": (ns["metadata"]["labels"], ns["metadata"]["resourceVersion"]),
        "secret": (secret["data"], secret["metadata"]["labels"], secret["metadata"]["resourceVersion"]),
        "statefulset": (statefulset["metadata"]["labels"], statefulset["metadata"]["resourceVersion"]),
    }


def patches_for(pipeline: Stack, cloud_space_id: str) -> list[dict[str, Any]]:
    assert pipeline.api is not None
    return [json.loads(r.body) for r in pipeline.api.requests() if r.path == f"/api/v1/cloudspaces/{cloud_space_id}"]


def reasons(pipeline: Stack, name: str) -> list[str]:
    return [e["reason"] for e in tenant_events(pipeline, name)]


@pytest.fixture(scope="module")
def bob(pipeline: Stack, kube: Kube) -> Tenant:
    return provision(pipeline, kube, "bob-dev", CS_BOB)


def test_everything_a_tenant_makes_carries_its_identity(pipeline: Stack, bob: Tenant) -> None:
    owner = {
        "kubeopera.io/owner-uid": bob.uid,
        "kubeopera.io/owner-namespace": TENANT_NAMESPACE,
        "kubeopera.io/owner-name": "bob-dev",
    }
    state = snapshot(pipeline, "bob-dev", CS_BOB)
    assert state["namespace"][0] == {
        "kubernetes.io/metadata.name": "vcluster-bob-dev",
        "kubeopera.io/tenant": "bob-dev",
        "kubeopera.io/tenant-id": CS_BOB,
        "kubeopera.io/managed-by": "tenant-controller",
        # Pod Security (shared.model.isolation): enforce baseline, report restricted
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
        **owner,
    }
    assert (
        state["secret"][1] == {"kubeopera.io/tenant-id": CS_BOB, "kubeopera.io/managed-by": "tenant-controller"} | owner
    )
    assert owner.items() <= state["helm values"]["controlPlane"]["statefulSet"]["labels"].items()
    assert owner.items() <= state["statefulset"][0].items()
    tenant = json.loads(pipeline.kubectl("get", "kt", "bob-dev", "-n", TENANT_NAMESPACE, "-o", "json"))
    assert tenant["metadata"]["finalizers"] == ["kubeopera.io/cleanup"]


def test_a_full_life_shows_in_kubectl_describe(pipeline: Stack, bob: Tenant) -> None:
    # Pending is the CRD's default from the Tenant's creation: no step writes it, so no Event
    assert reasons(pipeline, "bob-dev") == ["Provisioning", "Ready"]
    described = pipeline.kubectl("describe", "kt", "bob-dev", "-n", TENANT_NAMESPACE)
    events = described.split("Events:", 1)[1]
    for reason in ("Provisioning", "Ready"):
        assert f"  {reason}  " in events, described
    assert "tenant-install" in events and "tenant-notify-api" in events


def test_a_kept_label_removed_by_hand_comes_back_through_resync(pipeline: Stack, bob: Tenant) -> None:
    """The helm-records policy guards only the namespaces labelled ``kubeopera.io/managed-by``, and
    nothing but resync sends a settled Tenant to install for a label: its pass finds bob's
    namespace without it and sends bob to install, which puts it back. install's process checked
    bob's namespace when it provisioned him, so it is restarted first: one that checked less than
    ``access.RECHECK_SECONDS`` ago leaves it to the next pass."""
    settled(pipeline)
    namespace = "vcluster-bob-dev"

    def managed_by() -> str | None:
        labels = json.loads(pipeline.kubectl("get", "namespace", namespace, "-o", "json"))["metadata"]["labels"]
        return labels.get("kubeopera.io/managed-by")

    pipeline.kubectl("label", "namespace", namespace, "kubeopera.io/managed-by-")
    assert managed_by() is None
    pipeline.stop_function("tenant-install")
    pipeline.start_function("tenant-install")
    since = time.time()

    pipeline.tick()

    wait_for("the label back", lambda: managed_by() == "tenant-controller", timeout=60)
    settled(pipeline)
    sent = [
        d
        for d in pipeline.watch.deliveries()
        if d.time >= since and d.service == "tenant-install" and d.subject == f"{TENANT_NAMESPACE}/bob-dev"
    ]
    assert [(d.type, d.status) for d in sent] == [(event_types.INSTALL, 204)], sent
    assert reasons(pipeline, "bob-dev") == ["Provisioning", "Ready"], "bob was left as he was"


def test_reusing_a_tenant_name_fails_and_changes_nothing_of_the_owner(pipeline: Stack, kube: Kube, bob: Tenant) -> None:
    """The reproduction from the issue: another customer's Tenant asks for tenantName bob-dev."""
    settled(pipeline)
    before = snapshot(pipeline, "bob-dev", CS_BOB)
    apply(pipeline, "bob-dup", CS_BOB_DUP, tenant_name="bob-dev")
    failed = wait_for("bob-dup Failed", lambda: phase_of(kube, "bob-dup", "Failed"), timeout=60)
    assert failed.status.message == 'tenantName "bob-dev" is already used by Tenant kubeopera-system/bob-dev'
    ready = failed.status.condition("Ready")
    assert ready is not None and (ready.status, ready.reason) == ("False", "OwnershipConflict")
    settled(pipeline)
    assert snapshot(pipeline, "bob-dev", CS_BOB) == before
    assert not exists(pipeline, "secret", f"tenant-{CS_BOB_DUP}-kubeconfig", "-n", TENANT_NAMESPACE)
    assert patches_for(pipeline, CS_BOB_DUP) == []
    assert reasons(pipeline, "bob-dup") == ["OwnershipConflict"]
    warning = tenant_events(pipeline, "bob-dup")[-1]
    assert warning["type"] == "Warning" and "already used by Tenant kubeopera-system/bob-dev" in warning["message"]


def test_reusing_a_cloud_space_id_fails_before_anything_is_made(pipeline: Stack, kube: Kube, bob: Tenant) -> None:
    settled(pipeline)
    before = snapshot(pipeline, "bob-dev", CS_BOB)
    calls = len(patches_for(pipeline, CS_BOB))
    apply(pipeline, "carol-dup", CS_BOB, tenant_name="carol-other")
    failed = wait_for("carol-dup Failed", lambda: phase_of(kube, "carol-dup", "Failed"), timeout=60)
    assert failed.status.message == f'cloudSpaceID "{CS_BOB}" is already used by Tenant kubeopera-system/bob-dev'
    settled(pipeline)
    assert snapshot(pipeline, "bob-dev", CS_BOB) == before
    assert not exists(pipeline, "namespace", "vcluster-carol-other")
    assert len(patches_for(pipeline, CS_BOB)) == calls

    delete_and_wait_gone(pipeline, kube, "carol-dup")
    settled(pipeline)
    assert snapshot(pipeline, "bob-dev", CS_BOB) == before
    assert len(patches_for(pipeline, CS_BOB)) == calls, "kubeopera-api must not hear that bob's CloudSpace is gone"


def test_cleanup_of_the_refused_tenant_leaves_the_owners_vcluster_alone(
    pipeline: Stack, kube: Kube, bob: Tenant
) -> None:
    settled(pipeline)
    before = snapshot(pipeline, "bob-dev", CS_BOB)
    if kube.get_tenant(TENANT_NAMESPACE, "bob-dup") is None:
        apply(pipeline, "bob-dup", CS_BOB_DUP, tenant_name="bob-dev")
        wait_for("bob-dup Failed", lambda: phase_of(kube, "bob-dup", "Failed"), timeout=60)
    delete_and_wait_gone(pipeline, kube, "bob-dup")
    settled(pipeline)
    assert snapshot(pipeline, "bob-dev", CS_BOB) == before
    skipped = [e for e in tenant_events(pipeline, "bob-dup") if e["reason"] == "CleanupSkipped"]
    assert skipped and "left namespace vcluster-bob-dev alone" in skipped[0]["message"]
    assert "Tenant kubeopera-system/bob-dev" in skipped[0]["message"]


HELM_RECORDS_POLICY = REPO / "deploy" / "base" / "policy" / "tenant-helm-records.yaml"


def forged_record(pipeline: Stack, tenant_name: str, victim_namespace: str) -> dict[str, Any]:
    """issue 23's forgery: the tenant's own release record, version 99, under a name of its own,
    its manifest rewritten to name the neighbour's namespace."""
    namespace = f"vcluster-{tenant_name}"
    original = json.loads(
        pipeline.kubectl("get", "secret", f"sh.helm.release.v1.vc-{tenant_name}.v1", "-n", namespace, "-o", "json")
    )
    release = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(original["data"]["release"]))))
    release["version"] = 99
    release["manifest"] = release["manifest"].replace(f"namespace: {namespace}", f"namespace: {victim_namespace}")
    body = base64.b64encode(gzip.compress(json.dumps(release).encode())).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": original["type"],
        "metadata": {
            "name": f"vc-{tenant_name}-history",
            "namespace": namespace,
            "labels": original["metadata"]["labels"] | {"version": "99"},
        },
        "data": {"release": base64.b64encode(body.encode()).decode()},
    }


def test_a_tenant_forging_helm_history_is_refused_and_without_the_policy_harms_only_itself(
    pipeline: Stack, kube: Kube, bob: Tenant
) -> None:
    """Acting as ned's syncer: the forged record is refused at admission
    (tenant-helm-records.yaml). With that policy removed (test-only), the forgery is admitted,
    and the product's own check holds: ned's quota change fails him with ReleaseTampered and runs
    no helm, his deletion removes his namespace without asking helm, and bob's release, namespace,
    Secret and StatefulSet are byte-identical after."""
    provision(pipeline, kube, "ned", CS_NED)
    settled(pipeline)
    before = snapshot(pipeline, "bob-dev", CS_BOB)
    forged = json.dumps(forged_record(pipeline, "ned", "vcluster-bob-dev"))

    refused = kubectl_as(pipeline, pipeline.admin_kubeconfig, "create", "-f", "-", *as_syncer("ned"), input=forged)
    assert refused.returncode != 0 and "kubeopera-tenants-helm-records" in refused.stderr, refused.stderr

    pipeline.kubectl("delete", "-f", str(HELM_RECORDS_POLICY))
    try:
        wait_for(
            "the forgery admitted without the policy",
            lambda: (
                kubectl_as(
                    pipeline, pipeline.admin_kubeconfig, "create", "-f", "-", *as_syncer("ned"), input=forged
                ).returncode
                == 0
            ),
            timeout=30,
        )
        patch = {"spec": {"quota": {"cpu": "2", "memory": "2Gi"}}}
        pipeline.kubectl("patch", "kt", "ned", "-n", TENANT_NAMESPACE, "--type=merge", "-p", json.dumps(patch))
        failed = wait_for("ned Failed", lambda: phase_of(kube, "ned", "Failed"), timeout=60)
        assert failed.status.message.startswith(
            "the history of helm release vcluster-ned/vc-ned was tampered with: Secret vc-ned-history"
        ), failed.status.message
        assert "ReleaseTampered" in reasons(pipeline, "ned")
        assert not exists(pipeline, "secret", "sh.helm.release.v1.vc-ned.v2", "-n", "vcluster-ned"), "helm ran"

        delete_and_wait_gone(pipeline, kube, "ned")
        assert not exists(pipeline, "namespace", "vcluster-ned")
        settled(pipeline)
        assert snapshot(pipeline, "bob-dev", CS_BOB) == before
    finally:
        pipeline.kubectl("apply", "--server-side", "-f", str(HELM_RECORDS_POLICY))


def test_deleting_a_ready_tenant_removes_everything_then_the_tenant(pipeline: Stack, kube: Kube) -> None:
    erin = provision(pipeline, kube, "erin", CS_ERIN)
    assert exists(pipeline, "statefulset", "vc-erin", "-n", "vcluster-erin")
    # Protected (deploy/base/policy/tenant-deletion-protection.yaml), its deletion is refused and
    # nothing starts: no deletionTimestamp, so no cleanup; lifted, it deletes as any other.
    protect = ("annotate", "kt", "erin", "-n", TENANT_NAMESPACE)
    pipeline.kubectl(*protect, f"{ANNOTATION_DELETION_PROTECTION}=true")
    refused = kubectl_as(pipeline, pipeline.admin_kubeconfig, "delete", "kt", "erin", "-n", TENANT_NAMESPACE)
    assert refused.returncode != 0 and "is protected from deletion" in refused.stderr, refused.stderr
    protected = kube.get_tenant(TENANT_NAMESPACE, "erin")
    assert protected is not None and not protected.deleting and protected.uid == erin.uid
    pipeline.kubectl(*protect, f"{ANNOTATION_DELETION_PROTECTION}-")
    pipeline.kubectl("delete", "kt", "erin", "-n", TENANT_NAMESPACE, "--wait=false")
    deleting = wait_for("erin Deleting", lambda: phase_of(kube, "erin", "Deleting"), timeout=30)
    assert deleting.deleting
    wait_for("erin gone", lambda: kube.get_tenant(TENANT_NAMESPACE, "erin") is None, timeout=90)
    assert not exists(pipeline, "namespace", "vcluster-erin")
    assert not exists(pipeline, "secret", f"tenant-{CS_ERIN}-kubeconfig", "-n", TENANT_NAMESPACE)
    releases = helm(pipeline, "list", "--all-namespaces", "--all")
    assert not [r for r in releases if r["name"] == "vc-erin"]
    settled(pipeline)  # cleanup tells kubeopera-api after it removed the finalizer, in its delivery
    assert patches_for(pipeline, CS_ERIN)[-1] == {
        "vcluster_id": "vc-erin",
        "namespace": "vcluster-erin",
        "kubeconfig_secret": f"tenant-{CS_ERIN}-kubeconfig",
        "status": "deleted",
    }
    assert reasons(pipeline, "erin")[-2:] == ["CleanupStarted", "CleanupFinished"]

    again = provision(pipeline, kube, "erin", CS_ERIN)
    assert again.uid != erin.uid
    history = helm(pipeline, "history", "vc-erin", "-n", "vcluster-erin")
    assert [(h["revision"], h["status"]) for h in history] == [(1, "deployed")]
    labels = json.loads(pipeline.kubectl("get", "namespace", "vcluster-erin", "-o", "json"))["metadata"]["labels"]
    assert labels["kubeopera.io/owner-uid"] == again.uid


def test_a_volume_that_outlives_the_namespace_is_reported(pipeline: Stack, kube: Kube) -> None:
    """The chart's StatefulSet retains its claim; with a storage class of reclaim policy Retain its
    volume outlives the namespace, and the vCluster's data (its CA key among it) with it. No storage
    runs on this tier, so the volume is made as the provisioner would have bound it."""
    provision(pipeline, kube, "fay", CS_FAY)
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv-fay-data"},
        "spec": {
            "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": "/var/lib/fay"},
            "claimRef": {"namespace": "vcluster-fay", "name": "data-vc-fay-0"},
        },
    }
    pipeline.kubectl("apply", "-f", "-", input=json.dumps(volume))
    try:
        delete_and_wait_gone(pipeline, kube, "fay")
        retained = [e for e in tenant_events(pipeline, "fay") if e["reason"] == "VolumeRetained"]
        assert [(e["type"], e["message"]) for e in retained] == [
            (
                "Warning",
                "PersistentVolume pv-fay-data (reclaim Retain), once bound to vcluster-fay/data-vc-fay-0, still holds "
                "the tenant's data: delete it (kubectl delete pv pv-fay-data), or set DELETE_RETAINED_VOLUMES=true",
            )
        ]
        assert exists(pipeline, "pv", "pv-fay-data"), "reported, not deleted: DELETE_RETAINED_VOLUMES is off"
    finally:
        # The API server gives a volume the finalizer kubernetes.io/pv-protection, which only the
        # PV-protection controller (not run on this tier) would take off.
        pipeline.kubectl("delete", "pv", "pv-fay-data", "--ignore-not-found", "--wait=false")
        pipeline.kubectl("patch", "pv", "pv-fay-data", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')


def test_a_hand_made_namespace_is_refused_and_survives_the_tenants_deletion(pipeline: Stack, kube: Kube) -> None:
    pipeline.kubectl("create", "namespace", "vcluster-frank")
    pipeline.kubectl("create", "configmap", "precious", "-n", "vcluster-frank", "--from-literal=a=b")
    apply(pipeline, "frank", CS_FRANK)
    failed = wait_for("frank Failed", lambda: phase_of(kube, "frank", "Failed"), timeout=60)
    assert "namespace vcluster-frank exists but was not made by kubeopera-tenants" in failed.status.message
    assert "kubectl delete namespace vcluster-frank" in failed.status.message
    delete_and_wait_gone(pipeline, kube, "frank")
    assert exists(pipeline, "configmap", "precious", "-n", "vcluster-frank")
    assert "CleanupSkipped" in reasons(pipeline, "frank")


def test_a_tenant_of_a_plan_the_platform_lacks_fails_listing_the_plans(pipeline: Stack, kube: Kube) -> None:
    """install reads the plans of deploy/base's ConfigMap tenant-plans, as its pod would (the stack
    writes its files where PLANS_DIR points); a Tenant naming another plan is Failed before anything
    of it is made, and its deletion needs nothing but the finalizer's removal."""
    (config_map,) = [d for d in yaml.safe_load_all(project_path("deploy", "base", "plans.yaml").read_text()) if d]
    plans_dir = Path(pipeline.function_specs["tenant-install"].env["PLANS_DIR"])
    assert {f.name: f.read_text() for f in plans_dir.iterdir()} == config_map["data"]
    body = yaml.safe_load(tenant_yaml("pam", CS_PAM))
    body["spec"]["plan"] = "platinum"
    pipeline.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
    failed = wait_for("pam Failed", lambda: phase_of(kube, "pam", "Failed"), timeout=60)
    assert failed.status.message == "spec.plan 'platinum' is not a plan of this platform; the plans are: default"
    assert "UnknownPlan" in reasons(pipeline, "pam")
    assert not exists(pipeline, "namespace", "vcluster-pam")
    delete_and_wait_gone(pipeline, kube, "pam")


def test_a_tenant_restored_with_our_finalizer_goes_to_install_from_the_router(pipeline: Stack, kube: Kube) -> None:
    """A restore from a backup creates the Tenant with our finalizer already on, and its status is
    the CRD's default (Pending): the very object of install's own first write, which the router
    leaves alone. Only the event says otherwise (an add: no step's write), so the router sends it to
    install at once, and it does not wait for resync's tick (until 2026-12-07 it did)."""
    since = time.time()
    body = yaml.safe_load(tenant_yaml("rae", CS_RAE))
    body["metadata"]["finalizers"] = [FINALIZER]
    pipeline.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
    ready_and_announced(kube, pipeline, "rae", since, timeout=60)
    routed = [
        (d.type, d.reply_type)
        for d in pipeline.watch.deliveries()
        if d.time >= since and d.trigger == "tenant-router" and (d.subject or "").endswith("/rae")
    ]
    assert routed[0] == (event_types.APISERVER_ADD, event_types.INSTALL), routed
    delete_and_wait_gone(pipeline, kube, "rae")


def test_a_hand_made_kubeconfig_secret_is_never_overwritten(pipeline: Stack, kube: Kube) -> None:
    secret = f"tenant-{CS_GINA}-kubeconfig"
    pipeline.kubectl("create", "secret", "generic", secret, "-n", TENANT_NAMESPACE, "--from-literal=kubeconfig=mine")
    before = json.loads(pipeline.kubectl("get", "secret", secret, "-n", TENANT_NAMESPACE, "-o", "json"))
    apply(pipeline, "gina", CS_GINA)
    failed = wait_for("gina Failed", lambda: phase_of(kube, "gina", "Failed"), timeout=60)
    assert f"Secret {TENANT_NAMESPACE}/{secret} exists but was not made by kubeopera-tenants" in failed.status.message
    after = json.loads(pipeline.kubectl("get", "secret", secret, "-n", TENANT_NAMESPACE, "-o", "json"))
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert patches_for(pipeline, CS_GINA) == []
    delete_and_wait_gone(pipeline, kube, "gina")
    assert exists(pipeline, "secret", secret, "-n", TENANT_NAMESPACE)
    assert not exists(pipeline, "namespace", "vcluster-gina")


def test_deleting_mid_provisioning_cleans_up(pipeline: Stack, kube: Kube) -> None:
    apply(pipeline, "stuck-hal", CS_HAL)
    wait_for("stuck-hal Provisioning", lambda: phase_of(kube, "stuck-hal", "Provisioning"), timeout=60)
    delete_and_wait_gone(pipeline, kube, "stuck-hal")
    assert not exists(pipeline, "namespace", "vcluster-stuck-hal")


def test_deleting_when_the_namespace_is_gone_and_kubeopera_api_is_down(pipeline: Stack, kube: Kube) -> None:
    provision(pipeline, kube, "ivy", CS_IVY)
    pipeline.kubectl("delete", "namespace", "vcluster-ivy", "--wait=true", "--timeout=60s")
    assert pipeline.api is not None
    pipeline.api.set_mode("down")
    try:
        delete_and_wait_gone(pipeline, kube, "ivy")
        # kubeopera-api is told after the finalizer is gone (so only once): its failure comes last
        wait_for("the CallbackFailed Event", lambda: "CallbackFailed" in reasons(pipeline, "ivy"), timeout=30)
    finally:
        pipeline.api.set_mode("ok")
    assert not exists(pipeline, "secret", f"tenant-{CS_IVY}-kubeconfig", "-n", TENANT_NAMESPACE)


def test_a_tenant_that_never_boots_fails_at_its_timeout_not_by_dead_letter(pipeline: Stack, kube: Kube) -> None:
    apply(pipeline, "stuck-jo", CS_JO)
    failed = wait_for("stuck-jo Failed", lambda: phase_of(kube, "stuck-jo", "Failed"), timeout=TIMEOUT_SECONDS + 40)
    assert failed.status.message.startswith("vCluster not ready ")
    assert f"after provisioning began (PROVISION_TIMEOUT_SECONDS={TIMEOUT_SECONDS})" in failed.status.message
    assert "waiting for StatefulSet vcluster-stuck-jo/vc-stuck-jo to roll out generation 1" in failed.status.message
    ready = failed.status.condition("Ready")
    assert ready is not None and ready.reason == "ProvisionTimeout"
    assert pipeline.watch.wait_idle(60)  # a delivery is recorded once its answer went back
    polls = [
        a
        for a in pipeline.watch.deliveries()
        if a.trigger == "tenant-check-ready" and a.target != "dead-letter" and "stuck-jo" in (a.subject or "")
    ]
    # check-ready polled every 2 s (READY_POLL_SECONDS): each wait asked for it, the broker kept to
    # it, and it polled on until the timeout.
    waits = [p for p in polls if p.status == 503]
    assert len(waits) >= 3 and {p.retry_after for p in waits} == {"2"}, [(p.status, p.retry_after) for p in polls]
    gaps = [b.time - a.time for a, b in zip(waits, waits[1:], strict=False)]
    assert min(gaps) >= 1.9, gaps
    assert polls[-1].time - polls[0].time >= TIMEOUT_SECONDS - 4, "polled until the timeout"
    # check-ready failed it (422); a second poll chain, if install replied twice (its own status
    # writes are updates it takes too), ends at the Failed Tenant with 204: nothing polls on.
    statuses = [p.status for p in polls]
    assert 422 in statuses, statuses
    assert all(s in (204, 422) for s in statuses[statuses.index(422) + 1 :]), statuses
    dead = [a for a in pipeline.watch.deliveries() if a.target == "dead-letter" and "stuck-jo" in (a.subject or "")]
    # The 422 is dead-lettered as every permanent failure is, but the Tenant was already Failed
    # with the timeout's own message and the dead letter changed nothing.
    assert all(a.status == 204 for a in dead)
    assert reasons(pipeline, "stuck-jo")[-1] == "ProvisionTimeout"


def test_ready_was_proven_through_the_kubeconfig_the_customer_gets(
    pipeline: Stack, kube: Kube, bob: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check-ready reached bob's vCluster at the stored server name, over TLS with its own CA; the
    stored kubeconfig works the same way for anyone on the cluster network."""
    host = "vc-bob-dev.vcluster-bob-dev.svc"
    tunnels = [h for h in pipeline.proxy.hops() if h.method == "CONNECT" and h.host == host]
    assert tunnels and all(h.status == 200 for h in tunnels)
    stored = kube.read_secret_key(TENANT_NAMESPACE, f"tenant-{CS_BOB}-kubeconfig", "kubeconfig")
    assert stored is not None
    monkeypatch.setenv("HTTPS_PROXY", pipeline.proxy.url)  # this test's way onto the cluster network
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    assert VClusterApi().missing(stored) is None


def test_a_vcluster_up_but_unusable_stays_provisioning_saying_why_then_fails_at_its_timeout(
    pipeline: Stack, kube: Kube
) -> None:
    """Its StatefulSet is ready and its Secret written, the old definition of Ready; but its API
    does not answer (dark) or its certificate does not cover the exported name (narrow)."""
    apply(pipeline, "dark-uma", CS_DARK)
    apply(pipeline, "narrow-val", CS_NARROW)
    expected = {
        "dark-uma": "the vCluster's API at https://vc-dark-uma.vcluster-dark-uma.svc:443 cannot be reached",
        "narrow-val": "certificate is not valid for 'vc-narrow-val.vcluster-narrow-val.svc'",
    }
    for name, words in expected.items():
        waiting = wait_for(
            f"{name} says why it waits",
            lambda name=name, words=words: (  # type: ignore[misc]
                t if (t := kube.get_tenant(TENANT_NAMESPACE, name)) and words in t.status.message else None
            ),
            timeout=60,
        )
        assert waiting.status.phase.value == "Provisioning"
        ready = waiting.status.condition("Ready")
        assert ready is not None and (ready.status, ready.reason) == ("False", "VClusterNotServing")
        assert words in ready.message
        rollout = kube.get_rollout(f"vcluster-{name}", f"vc-{name}")
        assert rollout is not None and rollout.done  # what Ready used to mean (VClusterNotServing: its Secret too)
    for name, words in expected.items():
        failed = wait_for(
            f"{name} Failed", lambda name=name: phase_of(kube, name, "Failed"), timeout=TIMEOUT_SECONDS + 40
        )  # type: ignore[misc]
        assert words in failed.status.message and "PROVISION_TIMEOUT_SECONDS" in failed.status.message
        ready = failed.status.condition("Ready")
        assert ready is not None and ready.reason == "ProvisionTimeout"
    stored = [s for s in (f"tenant-{CS_DARK}-kubeconfig", f"tenant-{CS_NARROW}-kubeconfig")]
    assert all(kube.get_secret(TENANT_NAMESPACE, s) is None for s in stored), "nothing handed over"
    assert not patches_for(pipeline, CS_DARK) and not patches_for(pipeline, CS_NARROW), "kubeopera-api never told"


def test_a_tenant_made_by_the_previous_version_is_adopted_once(pipeline: Stack, kube: Kube) -> None:
    """The upgrade path: a namespace and release labelled as the version before ownership labelled
    them (the Tenant's name and cloudSpaceID, no uid) are this Tenant's; they get the uid once."""
    legacy_namespace(pipeline, "kim", CS_KIM)
    old_values = {
        "controlPlane": {
            "distro": {"k3s": {"enabled": True}},
            "statefulSet": {
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
                "labels": {
                    "kubeopera.io/environment": "local",
                    "kubeopera.io/tenant": "kim",
                    "kubeopera.io/tenant-id": CS_KIM,
                },
            },
        },
        "sync": {"toHost": {"ingresses": {"enabled": True}, "serviceAccounts": {"enabled": True}}},
        "exportKubeConfig": {"server": "https://vc-kim.vcluster-kim:443"},
        # A vCluster of the previous version that ever worked on this (1.34) host was given the
        # host's Service range: without it vcluster 0.21.2 crash-loops at its first boot and keeps
        # the wrong range for ever, adopted or not (test_faults: the wrong Service range).
        "serviceCIDR": "10.0.0.0/24",
    }
    values_file = pipeline.run_dir / "kim-old-values.yaml"
    values_file.write_text(yaml.safe_dump(old_values))
    with previous_install_rights(pipeline, "vcluster-kim"):  # which this version's install binds itself
        helm(
            pipeline,
            "install",
            "vc-kim",
            pipeline.chart_ref,
            "--version",
            "0.21.2",
            "-n",
            "vcluster-kim",
            "-f",
            str(values_file),
            identity="tenant-install",  # as the previous version's install did: no one else may write helm's records
        )
    stored = f"tenant-{CS_KIM}-kubeconfig"
    pipeline.kubectl("create", "secret", "generic", stored, "-n", TENANT_NAMESPACE, "--from-literal=kubeconfig=old")
    pipeline.kubectl(
        "label", "secret", stored, "-n", TENANT_NAMESPACE,
        f"kubeopera.io/tenant-id={CS_KIM}", "kubeopera.io/managed-by=tenant-controller",
    )  # fmt: skip
    kim = provision(pipeline, kube, "kim", CS_KIM)
    labels = json.loads(pipeline.kubectl("get", "namespace", "vcluster-kim", "-o", "json"))["metadata"]["labels"]
    assert labels["kubeopera.io/owner-uid"] == kim.uid
    secret = json.loads(pipeline.kubectl("get", "secret", stored, "-n", TENANT_NAMESPACE, "-o", "json"))
    assert secret["metadata"]["labels"]["kubeopera.io/owner-uid"] == kim.uid
    assert base64.b64decode(secret["data"]["kubeconfig"]) != b"old"
    history = helm(pipeline, "history", "vc-kim", "-n", "vcluster-kim")
    assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "deployed")]
    values = helm(pipeline, "get", "values", "vc-kim", "-n", "vcluster-kim")
    assert values["controlPlane"]["statefulSet"]["labels"]["kubeopera.io/owner-uid"] == kim.uid


@contextlib.contextmanager
def install_retries(pipeline: Stack, retry: int) -> Iterator[None]:
    """tenant-install's Trigger with ``retry`` retries while the block runs, as shipped after. The
    shipped budget (13 retries, 156 s and more) outlasts the longest helm run, too long to wait for
    here; how the broker gives up and what dead-letter does then do not depend on its length. Each
    change is waited for until the in-memory channel's dispatcher has it (the Subscription's
    delivery copied into the channel's spec, the channel reporting it ready) and an install event
    has reached install through it: in CI an event sent once the channel reported it ready went
    nowhere, because Knative's dispatcher had not applied the new Subscription yet (it reports
    subscribers ready even when it skips a channel that is not Ready)."""
    shipped = yaml.safe_load(project_path("eventing", "triggers", "tenant-install.yaml").read_text())["spec"][
        "delivery"
    ]["retry"]

    def set_retry(value: int) -> None:
        patch = json.dumps({"spec": {"delivery": {"retry": value}}})
        pipeline.kubectl("patch", "trigger", "tenant-install", "-n", TENANT_NAMESPACE, "--type=merge", "-p", patch)
        wait_for(
            f"tenant-install's retry {value} in the dispatcher",
            lambda: trigger_dispatched(pipeline, "tenant-install", value),
            timeout=60,
        )
        trigger_delivers(pipeline, "tenant-install", event_types.INSTALL)

    set_retry(retry)
    try:
        yield
    finally:
        set_retry(shipped)


def test_install_failing_past_its_retries_is_dead_lettered_to_failed(pipeline: Stack, kube: Kube) -> None:
    """install cannot go on (the Tenant's namespace is stuck Terminating: an object in it keeps a
    finalizer) and answers 503 each time; once the broker's retries run out it sends the event to
    the Trigger's dead-letter sink, and dead-letter fails the Tenant, saying which step gave up
    and why. (A foreign object in the way fails a Tenant at once: tests/e2e/test_pipeline.py.)"""
    legacy_namespace(pipeline, "lee", CS_LEE)
    held = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": "vcluster-lee", "finalizers": ["kubeopera.io/test-hold"]},
    }
    pipeline.kubectl("apply", "-f", "-", input=json.dumps(held))
    pipeline.kubectl("delete", "namespace", "vcluster-lee", "--wait=false")
    try:
        with install_retries(pipeline, 2):
            apply(pipeline, "lee", CS_LEE)
            failed = wait_for("lee Failed", lambda: phase_of(kube, "lee", "Failed"), timeout=90)
            assert pipeline.watch.wait_idle(60)  # a delivery is recorded once its answer went back
    finally:
        pipeline.kubectl(
            "patch", "configmap", "held", "-n", "vcluster-lee", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
        )
    assert "io.kubeopera.tenant.install could not be delivered to tenant-install" in failed.status.message
    assert "being deleted" in failed.status.message, failed.status.message
    assert reasons(pipeline, "lee")[-1] == "DeliveryFailed"
    installs = [
        d
        for d in pipeline.watch.deliveries()
        if d.trigger == "tenant-install" and d.target == "subscriber" and (d.subject or "").endswith("/lee")
    ]
    assert [d.status for d in installs] == [503, 503, 503], "the first delivery and two retries"
    # Knative's filter gave up and sent the event to the Trigger's dead-letter sink with its own
    # knativeerror* extensions: the Trigger whose delivery failed and the status it last got.
    dead = [d for d in pipeline.watch.deliveries() if d.target == "dead-letter" and (d.subject or "").endswith("/lee")]
    assert dead and dead[-1].trigger == "tenant-install" and dead[-1].status == 204
    assert dead[-1].error_code == "503", dead[-1]


def test_the_stuck_release_tenant_is_cleaned_even_after_failing(pipeline: Stack, kube: Kube) -> None:
    """A Failed Tenant (its vCluster never booted) is deleted with everything it made."""
    if kube.get_tenant(TENANT_NAMESPACE, "stuck-jo") is None:
        apply(pipeline, "stuck-jo", CS_JO)
        wait_for("stuck-jo Failed", lambda: phase_of(kube, "stuck-jo", "Failed"), timeout=TIMEOUT_SECONDS + 40)
    delete_and_wait_gone(pipeline, kube, "stuck-jo")
    assert not exists(pipeline, "namespace", "vcluster-stuck-jo")
    assert not [r for r in helm(pipeline, "list", "--all-namespaces", "--all") if r["name"] == "vc-stuck-jo"]


RACES = 20


def race_pair(k: int) -> tuple[str, str, str]:
    """The k-th race: a cloudSpaceID and two Tenants asking for it. The one created second sorts
    first by name, so that the older-Tenant rule (creation second, then name) counts it as the
    older: without the claim, both would go on whenever the first was installed before the
    second existed."""
    return f"0b0e7a52-8a41-4d3e-9a7e-2f2b3c4d{k:04x}", f"race{k:02d}-b", f"race{k:02d}-a"


def test_two_tenants_for_one_cloud_space_id_created_in_one_second_get_one_vcluster(pipeline: Stack, kube: Kube) -> None:
    """The same-second race, 20 times over, all in one apply (the API server writes the 40 Tenants
    within a second or two; each pair's two within one): each time one Ready, one Failed with the
    winner named, one release, one namespace. Then all 40 go, and every claim with them."""
    settled(pipeline)
    docs = []
    for k in range(RACES):
        cs, first, second = race_pair(k)
        docs += [tenant_yaml(first, cs), tenant_yaml(second, cs)]
    pipeline.kubectl("apply", "-f", "-", input="---\n".join(docs))
    created = {
        t["metadata"]["name"]: t["metadata"]["creationTimestamp"]
        for t in json.loads(pipeline.kubectl("get", "kt", "-n", TENANT_NAMESPACE, "-o", "json"))["items"]
    }
    same_second = sum(created[race_pair(k)[1]] == created[race_pair(k)[2]] for k in range(RACES))

    def race_tenants() -> list[dict[str, Any]]:
        items = json.loads(pipeline.kubectl("get", "kt", "-n", TENANT_NAMESPACE, "-o", "json"))["items"]
        return [t for t in items if t["metadata"]["name"].startswith("race")]

    def outcome() -> dict[str, str] | None:
        phases = {t["metadata"]["name"]: t.get("status", {}).get("phase", "") for t in race_tenants()}
        done = len(phases) == 2 * RACES and all(p in ("Ready", "Failed") for p in phases.values())
        return phases if done else None

    phases = wait_for("every race decided", outcome, timeout=240, interval=1)
    releases = {
        r["name"] for r in helm(pipeline, "list", "--all-namespaces", "--all") if r["name"].startswith("vc-race")
    }
    for k in range(RACES):
        cs, first, second = race_pair(k)
        pair = {first: phases[first], second: phases[second]}
        assert sorted(pair.values()) == ["Failed", "Ready"], f"race {k}: {pair}"
        winner = next(n for n, p in pair.items() if p == "Ready")
        loser = next(n for n, p in pair.items() if p == "Failed")
        failed = kube.get_tenant(TENANT_NAMESPACE, loser)
        assert failed is not None
        assert failed.status.message == f'cloudSpaceID "{cs}" is already used by Tenant {TENANT_NAMESPACE}/{winner}'
        assert f"vc-{winner}" in releases and f"vc-{loser}" not in releases, f"race {k}: {sorted(releases)}"
        assert exists(pipeline, "namespace", f"vcluster-{winner}")
        assert not exists(pipeline, "namespace", f"vcluster-{loser}")
        claim = json.loads(pipeline.kubectl("get", "lease", f"cloudspace-{cs}", "-n", TENANT_NAMESPACE, "-o", "json"))
        assert claim["spec"]["holderIdentity"] == f"{TENANT_NAMESPACE}/{winner}"
        assert [o["name"] for o in claim["metadata"]["ownerReferences"]] == [winner]
    assert len(releases) == RACES
    assert same_second >= RACES // 2, f"only {same_second} of {RACES} pairs were created in one second"

    pipeline.kubectl("delete", "kt", "-n", TENANT_NAMESPACE, *sorted(phases), "--wait=false")
    wait_for(
        "every race Tenant gone",
        lambda: not race_tenants(),
        timeout=180,
        interval=1,
    )
    leases = json.loads(pipeline.kubectl("get", "lease", "-n", TENANT_NAMESPACE, "-o", "json"))["items"]
    assert not [
        lease["metadata"]["name"]
        for lease in leases
        if lease["metadata"]["name"].startswith("cloudspace-0b0e7a52-8a41-4d3e-9a7e-2f")
    ]


def test_a_claim_left_by_a_tenant_that_is_gone_is_taken_over(pipeline: Stack, kube: Kube) -> None:
    """A claim outlives its Tenant until the garbage collector comes (or forever, restored from a
    backup without its owner): the next Tenant for that cloudSpaceID deletes it and claims anew."""
    cs = "0b0e7a52-8a41-4d3e-9a7e-3f2b3c4d0001"
    left = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": f"cloudspace-{cs}",
            "namespace": TENANT_NAMESPACE,
            "labels": {
                "kubeopera.io/owner-uid": "3d4c0f8e-0000-4000-8000-000000000000",
                "kubeopera.io/owner-namespace": TENANT_NAMESPACE,
                "kubeopera.io/owner-name": "gone-long-ago",
            },
        },
        "spec": {"holderIdentity": f"{TENANT_NAMESPACE}/gone-long-ago"},
    }
    pipeline.kubectl("apply", "-f", "-", input=json.dumps(left))
    mia = provision(pipeline, kube, "mia", cs)
    claim = json.loads(pipeline.kubectl("get", "lease", f"cloudspace-{cs}", "-n", TENANT_NAMESPACE, "-o", "json"))
    assert claim["metadata"]["labels"]["kubeopera.io/owner-uid"] == mia.uid
    assert claim["spec"]["holderIdentity"] == f"{TENANT_NAMESPACE}/mia"


def test_every_rbac_rule_is_used_by_the_code(pipeline: Stack) -> None:
    """Runs after the lifecycle tests: the audit log of everything the module did, against
    deploy/base/rbac and the ApiServerSource's rules. tenant-resync's rules are checked by
    tests/e2e/test_faults.py, where it does its work."""
    assert pipeline.control_plane is not None
    services = [s for s in pipeline.functions if s != "tenant-resync"]
    assert unused_rules(pipeline.control_plane.audit_log, [*services, *SOURCES]) == {}


def test_secrets_are_read_only_in_tenant_namespaces_and_never_refused_there(pipeline: Stack) -> None:
    """From the audit log of the whole module: install, check-ready, store-kubeconfig and cleanup
    touched Secrets only in vcluster-* namespaces (through what install granted there, itself
    included) and in kubeopera-system; in vcluster-* store-kubeconfig read vcluster's
    vc-<release> and nothing else; and install, check-ready and store-kubeconfig were never
    refused there, because install binds its own rights first and waits until they are in force,
    and makes the others' grants before it installs the release, so before either is asked."""
    assert pipeline.control_plane is not None
    entries = [json.loads(line) for line in pipeline.control_plane.audit_log.read_text().splitlines()]
    for service in ("tenant-install", "tenant-check-ready", "tenant-store-kubeconfig", "tenant-cleanup"):
        user = f"system:serviceaccount:{TENANT_NAMESPACE}:{service}"
        uses = [
            (e["objectRef"], e["verb"], e.get("responseStatus", {}).get("code"))
            for e in entries
            if e["user"]["username"] == user
            and e.get("stage") == "ResponseComplete"
            and (e.get("objectRef") or {}).get("resource") == "secrets"
        ]
        in_tenants = [(ref, verb, code) for ref, verb, code in uses if ref.get("namespace", "").startswith("vcluster-")]
        assert in_tenants, f"{service} read no Secret in a Tenant's namespace"
        allowed = [(ref, verb) for ref, verb, code in uses if code not in (401, 403)]
        assert [
            (ref.get("namespace"), ref.get("name"), verb)
            for ref, verb in allowed
            if ref.get("namespace") != TENANT_NAMESPACE and not ref.get("namespace", "").startswith("vcluster-")
        ] == [], f"{service} read Secrets outside kubeopera-system and the Tenants' namespaces"
        if service == "tenant-store-kubeconfig":
            assert {(ref["namespace"], ref.get("name"), verb) for ref, verb, _ in in_tenants} == {
                (ref["namespace"], "vc-vc-" + ref["namespace"].removeprefix("vcluster-"), "get")
                for ref, _, _ in in_tenants
            }
        if service != "tenant-cleanup":  # cleanup's may race its own namespace's deletion (temporary)
            assert [(ref, verb) for ref, verb, code in in_tenants if code in (401, 403)] == [], f"{service} was refused"


def test_cleanup_can_delete_nothing_outside_vcluster_namespaces_and_stored_kubeconfigs(pipeline: Stack) -> None:
    """RBAC lets tenant-cleanup delete namespaces and Secrets cluster-wide; the admission policy
    of deploy/base/policy confines it (the test bed applies both, as a cluster would)."""
    pipeline.kubectl("create", "secret", "generic", "not-a-kubeconfig", "-n", TENANT_NAMESPACE, "--from-literal=a=b")
    pipeline.kubectl("create", "namespace", "another-team")
    write = kubectl_as(
        pipeline,
        pipeline.function_kubeconfigs["tenant-cleanup"],
        "delete",
        "namespace",
        "another-team",
    )
    assert write.returncode != 0 and "tenant-cleanup may only change vcluster-*" in write.stderr
    # its deletes of the chart's kinds are cluster-wide in RBAC too (the policy's first binding)
    pipeline.kubectl("create", "configmap", "theirs", "-n", "another-team")
    theirs = kubectl_as(
        pipeline,
        pipeline.function_kubeconfigs["tenant-cleanup"],
        "delete",
        "configmap",
        "theirs",
        "-n",
        "another-team",
    )
    assert theirs.returncode != 0 and "tenant-cleanup may only change vcluster-*" in theirs.stderr
    internal = kubectl_as(
        pipeline,
        pipeline.function_kubeconfigs["tenant-cleanup"],
        "delete",
        "secret",
        "not-a-kubeconfig",
        "-n",
        TENANT_NAMESPACE,
    )
    assert internal.returncode != 0 and "tenant-*-kubeconfig" in internal.stderr
    assert exists(pipeline, "namespace", "another-team")
    assert exists(pipeline, "configmap", "theirs", "-n", "another-team")
    assert exists(pipeline, "secret", "not-a-kubeconfig", "-n", TENANT_NAMESPACE)


WRITE_SCOPE = REPO / "deploy" / "base" / "policy" / "tenant-write-scope.yaml"
WRITES = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE", "deletecollection": "DELETE"}


def judged_anywhere() -> set[tuple[str, str, str]]:
    """The (group, resource, operation) writes the write-scope's first binding takes, in every namespace."""
    binding = [d for d in yaml.safe_load_all(WRITE_SCOPE.read_text(encoding="utf-8")) if d][1]
    return {
        (group, resource, operation)
        for rule in binding["spec"]["matchResources"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for operation in rule["operations"]
    }


@pytest.mark.parametrize("function", ["tenant-install", "tenant-cleanup", "tenant-store-kubeconfig"])
def test_outside_their_namespaces_the_scoped_functions_may_write_only_what_the_scope_judges(
    pipeline: Stack, function: str
) -> None:
    """docs/deploy.md's check, as the function's own identity on the running test bed (its groups
    and every grant of the cluster included, not only deploy/'s): in a namespace that is neither a
    Tenant's nor kubeopera-system, every write its rules allow is one the write-scope policy's
    first binding takes, or a review (asked, never stored)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": "default"},
    }
    asked = kubectl_as(
        pipeline,
        pipeline.function_kubeconfigs[function],
        "create",
        "--validate=false",
        "-f",
        "-",
        "-o",
        "json",
        input=json.dumps(review),
    )
    assert asked.returncode == 0, asked.stderr
    rules = json.loads(asked.stdout)["status"]["resourceRules"]
    assert rules, "the review lists the function's rules"
    judged = judged_anywhere()
    unjudged = []
    for rule in rules:
        verbs = set(rule["verbs"])
        assert "*" not in verbs, rule
        for verb in verbs & set(WRITES):
            for group in rule.get("apiGroups", [""]):
                for resource in rule.get("resources", []):
                    if resource.endswith("reviews"):  # self-subject access, rules and whoami; token
                        continue
                    if (group, resource, WRITES[verb]) not in judged:
                        unjudged.append((verb, group, resource))
    assert unjudged == [], f"{function} may write these in default, and no policy judges them"


def scraped(url: str, name: str, labels: str) -> float:
    """One sample of a function's /metrics (0 when it is not there yet)."""
    for line in requests.get(url + "metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name}{{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_refused_status_write_still_answers_json_and_is_counted(pipeline: Stack) -> None:
    """A real 403: check-ready may read Tenants only in kubeopera-system. A replica of it told to
    serve namespace ``default`` (a misconfigured TENANT_NAMESPACE) fails on the read of a Tenant
    there, and marking that Tenant Failed fails the same way; the answer is still the JSON error
    mapping (422), never Flask's HTML 500, and the delivery is counted. (The functions as deployed
    ignore an event about a Tenant outside the namespace they serve: 204.)"""
    process, url = pipeline.start_replica("tenant-check-ready", {"TENANT_NAMESPACE": "default"}, "check-ready-default")
    try:
        labels = 'controller="check-ready",result="error"'
        before = scraped(url, "controller_runtime_reconcile_total", labels)
        answer = requests.post(
            url,
            headers={
                "ce-specversion": "1.0",
                "ce-id": "forbidden-1",
                "ce-source": "/test",
                "ce-type": "io.kubeopera.tenant.provisioning",
                "content-type": "application/json",
            }
            | pipeline.delivery_authorization("tenant-check-ready"),
            data=json.dumps({"namespace": "default", "name": "elsewhere", "uid": "u-1", "generation": 1}),
            timeout=30,
        )
        assert answer.status_code == 422, answer.text
        assert answer.headers["content-type"] == "application/json"
        assert "403" in answer.json()["error"]
        assert scraped(url, "controller_runtime_reconcile_total", labels) == before + 1
    finally:
        process.stop()


def test_one_helm_operation_at_a_time_while_helm_outlasts_the_lease(pipeline: Stack, kube: Kube) -> None:
    """Issue 26 item 3: helm takes longer than the work Lease lasts (a wrapper through
    ``HELM_EXECUTABLE`` sleeps 35 s before the real helm; the Lease lasts 30 s), and a second
    install process gets the Tenant's event once the Lease would have run out. Before, the Lease was
    never renewed, so the second took it and ran helm on the same release under the first. Now the
    holder renews it every 10 s: the second answers "in hand" (503) and the audit log shows one
    helm operation: one release record created and none refused, the Lease renewed meanwhile."""
    name = "slow-helm"
    lease = f"lock-vcluster-{name}"
    apply(pipeline, name, CS_SLOW)
    taken = wait_for(
        f"Lease {lease} taken",
        lambda: exists(pipeline, "lease", lease, "-n", TENANT_NAMESPACE) and time.time(),
        timeout=60,
        interval=0.2,
    )
    obj = json.loads(pipeline.kubectl("get", "kt", name, "-n", TENANT_NAMESPACE, "-o", "json"))
    headers, body = events.to_binary(events.make(event_types.INSTALL, "router", Tenant.from_object(obj).ref))
    headers |= pipeline.delivery_authorization("tenant-install")
    process, second = pipeline.start_replica("tenant-install", name="tenant-install-slow")
    try:
        wait_for("the Lease's time to pass", lambda: time.time() - taken > LEASE_SECONDS + 2, timeout=60)
        answer = requests.post(second, headers=headers, data=body, timeout=120)
    finally:
        process.stop()
    assert answer.status_code == 503 and answer.json().get("inHand") is True, answer.text
    tenant = ready_and_announced(kube, pipeline, name, taken, timeout=120)
    assert tenant.status.is_true("Ready", tenant.generation)

    records = completed_requests(pipeline, "sh.helm.release.v1.vc-slow-helm.")
    assert [e["objectRef"]["name"] for e in records if e["verb"] == "create"] == ["sh.helm.release.v1.vc-slow-helm.v1"]
    assert [e for e in records if e["responseStatus"]["code"] == 409] == [], "no helm found the release in use"
    history = helm(pipeline, "history", "vc-slow-helm", "-n", "vcluster-slow-helm")
    assert [(h["revision"], h["status"]) for h in history] == [(1, "deployed")]
    renewals = [
        e
        for e in completed_requests(pipeline, lease)
        if e["verb"] == "update" and e["objectRef"]["name"] == lease and e["responseStatus"]["code"] == 200
    ]
    assert len(renewals) >= 3, "renewed every 10 s while helm ran"
    delete_and_wait_gone(pipeline, kube, name)
