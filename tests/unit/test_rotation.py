"""``kubeopera-tenants rotate``: which Tenants it takes, the order of its three writes, and how it
judges the pipeline's answer (shared/steps/rotation.py), against the fake adapter."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from shared.model.naming import KUBECONFIG_KEY
from shared.model.tenant import FINALIZER, Tenant
from shared.steps.rotation import Progress, RotationError, certs_secret, progress, refusal, rotate

from .fakes import TENANT_NAMESPACE, FakeKube, tenant_object

CS_BOB = "4a0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6f"
NS, RELEASE = "vcluster-bob-dev", "vc-bob-dev"
STORED = f"tenant-{CS_BOB}-kubeconfig"
EARLY = "2026-11-30T12:00:00Z"


def kubeconfig(cert: str) -> bytes:
    b64 = base64.b64encode
    return yaml.safe_dump(
        {
            "clusters": [{"name": "c", "cluster": {"server": "https://vc", "certificate-authority-data": "Q0E="}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
            "current-context": "c",
            "users": [
                {
                    "name": "c",
                    "user": {"client-certificate-data": b64(cert.encode()).decode(), "client-key-data": "S0VZ"},
                }
            ],
        }
    ).encode()


def status(phase: str, callback: str = "True", message: str = "vCluster ready") -> dict[str, Any]:
    cond = {"observedGeneration": 1, "lastTransitionTime": EARLY}
    return {
        "phase": phase,
        "observedGeneration": 1,
        "lastSyncedAt": EARLY,
        "message": message,
        "conditions": [
            {"type": "ReleaseInstalled", "status": "True", "reason": "Installed", **cond},
            {"type": "CallbackDelivered", "status": callback, "reason": "Delivered", "message": "answered 503", **cond},
            {"type": "Ready", "status": "True", "reason": "VClusterReady", **cond},
        ],
    }


def bob(phase: str = "Ready", callback: str = "True", deleting: bool = False) -> Tenant:
    obj = tenant_object("bob-dev", CS_BOB, status=status(phase, callback), finalizers=[FINALIZER])
    if deleting:
        obj["metadata"]["deletionTimestamp"] = EARLY
    return Tenant.from_object(obj)


@pytest.fixture
def ready_bob(kube: FakeKube) -> FakeKube:
    """bob Ready, his vCluster booted with certificate OLD and its certificates Secret in place."""
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, status=status("Ready"), finalizers=[FINALIZER]))
    kube.boot_vcluster("bob-dev", kubeconfig("OLD"))
    kube.add_secret(NS, certs_secret(RELEASE), {"ca.key": b"old CA key"}, {"app": "vcluster"})
    kube.add_secret(TENANT_NAMESPACE, STORED, {KUBECONFIG_KEY: kubeconfig("OLD")}, {})
    return kube


def test_only_a_ready_tenant_is_rotated() -> None:
    ref = f"{TENANT_NAMESPACE}/bob-dev"
    assert refusal(bob(), ref) is None
    assert refusal(None, ref) == f"tenant {ref} not found"
    assert refusal(bob(deleting=True), ref) == f"tenant {ref} is being deleted"
    for phase in ("Pending", "Provisioning", "Failed"):
        assert refusal(bob(phase), ref) == (
            f"tenant {ref} is {phase}, not Ready; only a Ready tenant's certificates are rotated"
        )


def test_progress_is_done_only_with_a_new_certificate_stored_and_announced() -> None:
    old = b"OLD"
    assert progress(bob(), kubeconfig("NEW"), old) == Progress(done=True)
    assert progress(bob("Provisioning"), kubeconfig("OLD"), old).waiting_for.startswith(
        "the tenant to be Ready again (it is Provisioning: "
    )
    assert progress(bob(), None, old) == Progress(waiting_for="the new kubeconfig to be stored")
    assert progress(bob(), kubeconfig("OLD"), old) == Progress(
        failed="the tenant is Ready again with the old client certificate: the vCluster did not re-issue it"
    )
    assert progress(bob(callback="False"), kubeconfig("NEW"), old) == Progress(
        waiting_for="kubeopera-api to take the announcement (answered 503); resync sends it again"
    )
    assert progress(None, None, old) == Progress(failed="the tenant was deleted")
    failed = progress(bob("Failed"), kubeconfig("OLD"), old)
    assert failed.failed == "the tenant is Failed: vCluster ready" and not failed.done


def test_rotate_deletes_the_certificates_then_restarts_then_asks_for_pending(ready_bob: FakeKube) -> None:
    """The order that keeps check-ready from handing over the old kubeconfig again; then it waits
    until the pipeline has stored and announced a new one."""
    kube = ready_bob
    journal_at_start = len(kube.journal)

    def pipeline(_: float) -> None:  # what the router, install ... notify-api do meanwhile
        assert kube.get_tenant(TENANT_NAMESPACE, "bob-dev").status.phase.value == "Pending"  # type: ignore[union-attr]
        kube.secrets[(TENANT_NAMESPACE, STORED)]["data"] = {KUBECONFIG_KEY: kubeconfig("NEW")}
        kube.set_phase(TENANT_NAMESPACE, "bob-dev", "Ready")

    said = rotate(kube, TENANT_NAMESPACE, "bob-dev", timeout=60, sleep=pipeline)

    assert said == (
        f"tenant {TENANT_NAMESPACE}/bob-dev: new certificates issued, kubeconfig stored in Secret "
        f"{TENANT_NAMESPACE}/{STORED}, kubeopera-api told"
    )
    assert [what for what, _ in kube.journal[journal_at_start:]] == [
        "secret delete",
        "statefulset restart",
        "status",
    ], kube.journal
    assert (NS, certs_secret(RELEASE)) not in kube.secrets
    assert kube.rollouts[(NS, RELEASE)].generation == 2


def test_rotate_says_what_it_still_waits_for_at_its_timeout(ready_bob: FakeKube) -> None:
    now = [0.0]

    def later(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(RotationError) as err:
        rotate(ready_bob, TENANT_NAMESPACE, "bob-dev", timeout=10, sleep=later, clock=lambda: now[0])
    said = str(err.value)
    assert said.startswith(f"tenant {TENANT_NAMESPACE}/bob-dev: not done 10s after "), said
    assert "; waiting for the tenant to be Ready again (it is Pending: certificate rotation requested at " in said
    assert said.endswith("; the vCluster restarts with new ones)"), said


def test_rotate_fails_when_the_tenant_does(ready_bob: FakeKube) -> None:
    def fails(_: float) -> None:
        ready_bob.set_phase(TENANT_NAMESPACE, "bob-dev", "Failed")

    with pytest.raises(RotationError, match="failed: the tenant is Failed: "):
        rotate(ready_bob, TENANT_NAMESPACE, "bob-dev", timeout=60, sleep=fails)


def test_rotate_leaves_a_tenant_that_is_not_ready_untouched(kube: FakeKube) -> None:
    kube.add_tenant(tenant_object("bob-dev", CS_BOB, status=status("Provisioning"), finalizers=[FINALIZER]))
    kube.boot_vcluster("bob-dev", kubeconfig("OLD"))
    kube.add_secret(NS, certs_secret(RELEASE), {"ca.key": b"old CA key"}, {"app": "vcluster"})
    journal = list(kube.journal)
    with pytest.raises(RotationError, match="is Provisioning, not Ready"):
        rotate(kube, TENANT_NAMESPACE, "bob-dev", timeout=60, sleep=lambda _: None)
    assert kube.journal == journal and (NS, certs_secret(RELEASE)) in kube.secrets


def test_rotate_without_a_statefulset_says_so(ready_bob: FakeKube) -> None:
    del ready_bob.rollouts[(NS, RELEASE)]
    with pytest.raises(RotationError, match=f"has no StatefulSet {NS}/{RELEASE} to restart"):
        rotate(ready_bob, TENANT_NAMESPACE, "bob-dev", timeout=60, sleep=lambda _: None)
