"""Nothing stays stuck: each fault injected for real, and every Tenant converges.

Faults come from stopping or killing real processes (the ApiServerSource adapter's pod, Knative's
broker data plane, helm, a gunicorn worker), deleting real objects, or the kubeopera-api stand-in
answering badly; nothing is patched in the code under test. Recovery comes from the product
itself: Knative's re-deliveries, install's recovery of stuck helm releases and its Lease, and
resync, whose PingSource event the test sends when it wants one (``pipeline.tick()``), as the
PingSource would on its schedule (every 5 minutes: too slow to wait for).

Each test prints one line for the fault table (what the Tenant ended as, in how long); run with
``-s`` to see them. The last test deletes every Tenant and checks nothing was left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.adapters.kube import Kube
from shared.delivery import events
from shared.model import event_types, lifecycle
from shared.model.tenant import Tenant, parse_time, utcnow
from shared.steps.locks import work_lock
from testbed.admin_kube import AdminKube
from testbed.knative.broker_watch import Delivery
from testbed.local.api_gate import ApiGate
from testbed.local.manifests import VCLUSTER_WATCH
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, start_stack
from testbed.processes import run
from testbed.toolchain import Toolchain

from .rbac_usage import unused_rules
from .support import (
    completed_requests,
    exists,
    helm,
    phase_of,
    poll_quiet,
    tenant_yaml,
    trigger_filtered_away,
    wait_for,
)

pytestmark = pytest.mark.integration

# STUCK_RELEASE_SECONDS: a pending release older than this is recovered. It must exceed helm's
# deadline + 2 s (Settings' rule); install's re-deliveries come 1, 3, 7, 15 and 31 s after the first,
# so a release killed at once is recovered at the fourth, as it was with 8.
STUCK_SECONDS = 12
HELM_DEADLINE_SECONDS = 9  # three times what a helm run of the stand-in chart takes on a busy machine
TIMEOUT_SECONDS = 15  # PROVISION_TIMEOUT_SECONDS
STALL_SECONDS = 60  # CLEANUP_STALL_SECONDS: a deletion that has not moved this long is given up. Not less:
# with four groups at once the namespace controller took 32 s to finish a namespace, and 20 failed
# the last test's Tenants (CI of f3fb643: CleanupFailed "nothing moved for 22s")
ORPHAN_GRACE_SECONDS = 5  # a namespace whose owner Tenant is gone is removed once this old


HUNG_HELM = 86398  # the number of the sleep a hung helm is (no other process sleeps this long)


def helm_that_hangs_once(folder: Path, real: Path) -> Path:
    """The fault stack's HELM_EXECUTABLE: helm, except the first upgrade of a release named
    ``vc-fa-hung*``, which never answers (a helm hung on a dead connection, say)."""
    script = folder / "helm-that-hangs-once"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1 $2" in "upgrade vc-fa-hung"*)\n'
        f'  mkdir "{folder}/$2" 2>/dev/null && exec sleep {HUNG_HELM};;\n'
        "esac\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)
    return script


@pytest.fixture(scope="module")
def pipeline(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    hangs_once = helm_that_hangs_once(tmp_path_factory.mktemp("helm"), toolchain.helm)
    options = StackOptions(
        api_token="faults-token",
        vcluster_boot_seconds=2,
        ready_poll_seconds=1,
        cleanup_poll_seconds=1,
        stuck_release_seconds=STUCK_SECONDS,
        helm_deadline_seconds=HELM_DEADLINE_SECONDS,
        provision_timeout_seconds=TIMEOUT_SECONDS,
        vcluster_never_boot=r"vc-stuck-.*",
        function_env={
            "CLEANUP_STALL_SECONDS": str(STALL_SECONDS),
            "HELM_EXECUTABLE": str(hangs_once),
            "ORPHAN_GRACE_SECONDS": str(ORPHAN_GRACE_SECONDS),
        },
    )
    with start_stack(options) as stack:
        # These tests send resync's tick themselves, when a fault needs it: the stack holds the
        # PingSource's own schedule (StackOptions.resync_schedule).
        assert stack.resync_schedule_held()
        yield stack


def cs(n: int) -> str:
    return f"fa017000-0000-4000-8000-{n:012d}"


def ready(kube: Kube, name: str, generation: int = 1, timeout: float = 90) -> Tenant:
    def probe() -> Tenant | None:
        tenant = phase_of(kube, name, "Ready")
        return tenant if tenant is not None and tenant.status.observed_generation == generation else None

    return wait_for(f"{name} Ready at generation {generation}", probe, timeout=timeout)


def report(fault: str, tenant: Tenant, started: float) -> None:
    print(f"\nFAULT | {fault} | {tenant.status.phase} | {time.monotonic() - started:.1f} s")


def tick(pipeline: Stack) -> None:
    """A resync pass, answered: what it re-drives goes on after this returns."""
    pipeline.resync(settle=False)


@pytest.fixture(autouse=True)
def quiet_broker(pipeline: Stack) -> None:
    """Each fault starts on an idle broker: no retry of an earlier test's event can land in it."""
    assert pipeline.watch.wait_idle(120), f"still to be re-delivered: {pipeline.watch.pending()}"


def polls_of(pipeline: Stack, name: str) -> list[Delivery]:
    """check-ready's deliveries for the Tenant ``name``, as Knative's broker made them."""
    return [
        d
        for d in pipeline.watch.deliveries()
        if d.trigger == "tenant-check-ready" and d.target == "subscriber" and (d.subject or "").endswith(f"/{name}")
    ]


def history(pipeline: Stack, release: str) -> list[tuple[int, str]]:
    return [(h["revision"], h["status"]) for h in helm(pipeline, "history", release, "-n", f"vcluster-{release[3:]}")]


# -- processes --------------------------------------------------------------------------------


def helm_processes(release: str) -> list[int]:
    """pids of helm processes working on ``release`` (an install, upgrade or rollback)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"/helm") and release.encode() in argv and b"upgrade" in argv:
            found.append(int(entry))
    return found


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def gunicorn_worker_above(pid: int) -> int:
    """The gunicorn worker a helm process runs under (helm < /bin/sh < worker < master)."""
    while pid > 1:
        pid = parent_of(pid)
        if (
            b"gunicorn" in Path(f"/proc/{pid}/cmdline").read_bytes()
            and b"gunicorn" in Path(f"/proc/{parent_of(pid)}/cmdline").read_bytes()
        ):
            return pid
    raise AssertionError("no gunicorn worker above the helm process")


def kill_midway(kube: AdminKube, release: str, status: str, kill_worker: bool = False, timeout: float = 60) -> bool:
    """SIGKILL helm (or the gunicorn worker running it) once helm has recorded the release as
    ``status`` (pending-install / pending-upgrade) and before it finishes. False if helm was done
    before that moment could be caught."""
    deadline = time.monotonic() + timeout
    pids: list[int] = []
    while not pids and time.monotonic() < deadline:
        pids = helm_processes(release)
        time.sleep(0.002)
    assert pids, f"no helm process for {release} within {timeout}s"
    target = gunicorn_worker_above(pids[0]) if kill_worker else pids[0]
    # helm is stopped (SIGSTOP) while its record is read, and runs only a few milliseconds between
    # two reads: however slow a read is on a busy machine, helm cannot get from writing the pending
    # record to finishing unseen.
    while Path(f"/proc/{pids[0]}").exists():
        try:
            os.kill(pids[0], signal.SIGSTOP)
        except ProcessLookupError:
            break
        try:
            if kube.list_secrets_everywhere(f"owner=helm,name={release},status={status}"):
                os.kill(target, signal.SIGKILL)
                return True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[0], signal.SIGCONT)
        time.sleep(0.002)
    return False


@pytest.fixture
def adapter_down(pipeline: Stack) -> Iterator[None]:
    """The ApiServerSource's pod gone for the test's first part (its Deployment, made by Knative's
    controller, stays); ``start_adapter_again`` brings it back."""
    pipeline.stop_adapter()
    yield
    if any(key.startswith(f"{TENANT_NAMESPACE}/") for key in pipeline.kubelet.held()):
        start_adapter_again(pipeline)


def start_adapter_again(pipeline: Stack) -> None:
    pipeline.start_adapter()


# -- the fault table --------------------------------------------------------------------------


def test_the_vcluster_watch_down_leaves_readiness_to_the_poll(pipeline: Stack, kube: Kube) -> None:
    """The vCluster watch's pod gone (its hints lost): check-ready's poll alone finds the vCluster
    up, as before the watch existed; no hint reaches check-ready for this Tenant."""
    pipeline.stop_function(VCLUSTER_WATCH)
    try:
        started = time.monotonic()
        pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-unheard", cs(40)))
        tenant = ready(kube, "fa-unheard")
    finally:
        pipeline.start_function(VCLUSTER_WATCH)
    mine = [d for d in pipeline.watch.deliveries() if d.subject == f"{TENANT_NAMESPACE}/fa-unheard"]
    assert [d.trigger for d in mine if d.reply_type == event_types.READY] == ["tenant-check-ready"]
    assert not [d for d in mine if d.trigger == "tenant-check-ready-hint"]
    report("vCluster watch down while a vCluster boots", tenant, started)


def test_adapter_down_while_a_tenant_is_created(pipeline: Stack, kube: Kube, adapter_down: None) -> None:
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-adapter", cs(1)))
    time.sleep(3)
    tenant = kube.get_tenant(TENANT_NAMESPACE, "fa-adapter")
    assert tenant is not None and lifecycle.unwritten(tenant), "with the adapter down nothing saw the Tenant"
    assert tenant.status.phase == "Pending" and not tenant.has_finalizer, "Pending is the CRD's default"
    start_adapter_again(pipeline)  # it sends nothing for objects that already exist
    time.sleep(3)
    tenant = kube.get_tenant(TENANT_NAMESPACE, "fa-adapter")
    assert tenant is not None and lifecycle.unwritten(tenant), "the restarted adapter does not replay"
    assert not tenant.has_finalizer
    tick(pipeline)
    report("adapter down while a Tenant is created", ready(kube, "fa-adapter"), started)


def test_broker_restarted_mid_chain(pipeline: Stack, kube: Kube) -> None:
    """Knative's MTChannelBasedBroker on the InMemoryChannel keeps in-flight events in memory: a
    restart of its data plane (ingress, filter, channel dispatcher) loses check-ready's next poll.
    Resync is what finds the Tenant again (docs/deploy.md: a durable broker class avoids the loss).
    The vCluster watch is held here: its hint of the vCluster booting after the restart would
    otherwise bring the Tenant to Ready itself (check-ready's look), and resync's part is what
    this fault is about."""
    started = time.monotonic()
    pipeline.stop_function(VCLUSTER_WATCH)
    try:
        _lose_the_chain_with_the_broker(pipeline, kube)
    finally:
        pipeline.start_function(VCLUSTER_WATCH)
    tick(pipeline)
    report("broker restarted mid-chain", ready(kube, "fa-broker"), started)


def _lose_the_chain_with_the_broker(pipeline: Stack, kube: Kube) -> None:
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-broker", cs(2)))
    wait_for("fa-broker Provisioning", lambda: phase_of(kube, "fa-broker", "Provisioning"), timeout=60)
    # At once after the first poll (503, Retry-After 1 s): the filter holds its retry.
    wait_for("check-ready's first poll", lambda: polls_of(pipeline, "fa-broker"), timeout=30, interval=0.01)
    pipeline.restart_broker()  # killed: the retry it held is gone
    restarted = time.time()
    # The vCluster boots meanwhile, and the poll held for 1 s would have come long before, but
    # nobody asks.
    wait_for(
        "fa-broker's vCluster booted",
        lambda: exists(pipeline, "secret", "vc-vc-fa-broker", "-n", "vcluster-fa-broker"),
        timeout=30,
    )
    assert pipeline.watch.wait_idle(30)
    assert phase_of(kube, "fa-broker", "Provisioning") is not None, "the chain was lost with the broker"
    assert [d for d in polls_of(pipeline, "fa-broker") if d.time > restarted] == [], "nothing is re-delivered"
    poll_quiet(kube, "fa-broker")


def test_helm_killed_mid_install(pipeline: Stack, kube: Kube) -> None:
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-helm", cs(3)))
    assert kill_midway(kube, "vc-fa-helm", "pending-install"), "helm finished before it could be killed"
    tenant = ready(kube, "fa-helm", timeout=120)
    assert history(pipeline, "vc-fa-helm") == [(1, "deployed")], "the stuck install was uninstalled and redone"
    report("helm killed mid-install", tenant, started)


def test_helm_killed_mid_upgrade(pipeline: Stack, kube: Kube) -> None:
    assert kube.get_tenant(TENANT_NAMESPACE, "fa-helm") is not None, "runs after test_helm_killed_mid_install"
    ready(kube, "fa-helm")
    started = time.monotonic()
    patch = json.dumps({"spec": {"quota": {"cpu": "3", "memory": "3Gi"}}})
    pipeline.kubectl("patch", "kt", "fa-helm", "-n", TENANT_NAMESPACE, "--type=merge", "-p", patch)
    assert kill_midway(kube, "vc-fa-helm", "pending-upgrade"), "helm finished before it could be killed"
    tenant = ready(kube, "fa-helm", generation=2, timeout=120)
    # Rolled back, then upgraded: helm keeps the killed revision's record as it was
    # (pending-upgrade) in the history, but only the newest revision counts, and it is deployed.
    statuses = [status for _, status in history(pipeline, "vc-fa-helm")]
    assert statuses[-1] == "deployed" and statuses.count("deployed") == 1, statuses
    assert statuses[-2] == "superseded", "the rollback's revision, superseded by the upgrade"
    values = helm(pipeline, "get", "values", "vc-fa-helm", "-n", "vcluster-fa-helm")
    assert values["controlPlane"]["statefulSet"]["resources"]["limits"] == {"cpu": "3", "memory": "3Gi"}
    report("helm killed mid-upgrade", tenant, started)


def test_a_hung_helm_is_stopped_at_its_deadline_and_the_tenant_still_provisions(pipeline: Stack, kube: Kube) -> None:
    """HELM_DEADLINE_SECONDS: install's first helm never answers; it is stopped at the deadline, the
    delivery is answered 503 saying so, and the broker's re-delivery provisions the Tenant: Ready,
    never Failed, one revision, nothing of the hung helm left."""
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-hung", cs(20)))
    tenant = ready(kube, "fa-hung", timeout=120)
    assert pipeline.watch.wait_idle(60)
    installs = [
        d
        for d in pipeline.watch.deliveries()
        if d.trigger == "tenant-install" and d.target == "subscriber" and (d.subject or "").endswith("/fa-hung")
    ]
    assert [d.status for d in installs][:2] == [503, 200], installs
    log = (pipeline.log_dir() / "tenant-install.log").read_text(errors="replace")
    said = [line for line in log.splitlines() if "vc-fa-hung" in line and "HELM_DEADLINE_SECONDS" in line]
    assert said and "helm did not finish within HELM_DEADLINE_SECONDS and was stopped" in said[0], said
    assert not [d for d in pipeline.watch.deliveries() if d.target == "dead-letter" and "fa-hung" in (d.subject or "")]
    assert history(pipeline, "vc-fa-hung") == [(1, "deployed")]
    assert run(["pgrep", "-f", f"^sleep {HUNG_HELM}$"], check=False).returncode == 1, "the hung helm is gone"
    report("helm hung past HELM_DEADLINE_SECONDS", tenant, started)


OLD_INSTALL_BUDGET = 31  # seconds: install's Trigger before issue 26 (5 exponential retries from 1 s)


def test_a_delivery_waiting_on_another_pods_helm_outlasts_the_old_retry_budget(pipeline: Stack, kube: Kube) -> None:
    """Issue 26 item 1: another install process holds the Tenant namespace's work lock (renewing
    it, as one whose helm runs long does) while a quota change arrives. install answers 503 inHand with
    Retry-After 5 for longer than the old budget lasted; once the Lease is free the change is
    upgraded: Ready at the new generation, never Failed, nothing dead-lettered, one new revision."""
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-wait", cs(21)))
    names = ready(kube, "fa-wait").spec.names
    phases: list[str] = []

    def install_deliveries(since: float) -> list[Delivery]:
        return [
            d
            for d in pipeline.watch.deliveries()
            if d.trigger == "tenant-install"
            and d.target == "subscriber"
            and (d.subject or "").endswith("/fa-wait")
            and d.time >= since
        ]

    def waited_past_the_old_budget() -> bool:
        tenant = kube.get_tenant(TENANT_NAMESPACE, "fa-wait")
        phases.append(str(tenant.status.phase if tenant else None))
        refused = [d for d in install_deliveries(changed_at) if d.status == 503]
        return bool(refused) and time.time() - refused[0].time > OLD_INSTALL_BUDGET + 5

    with work_lock(kube, TENANT_NAMESPACE, names):  # this process is the other pod
        changed_at = time.time()
        pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-wait", cs(21), cpu="2"))
        wait_for("install's retries past the old budget", waited_past_the_old_budget, timeout=OLD_INSTALL_BUDGET + 60)
    tenant = ready(kube, "fa-wait", generation=2, timeout=60)
    assert "Failed" not in phases, phases
    assert pipeline.watch.wait_idle(60)
    waited = [d.status for d in install_deliveries(changed_at)]
    assert waited[-1] == 200 and set(waited[:-1]) == {503} and len(waited) >= 5, waited
    assert not [d for d in pipeline.watch.deliveries() if d.target == "dead-letter" and "fa-wait" in (d.subject or "")]
    assert history(pipeline, "vc-fa-wait") == [(1, "superseded"), (2, "deployed")]
    report("install waits on another pod's helm past the old retry budget", tenant, started)


def test_function_worker_killed_mid_install(pipeline: Stack, kube: Kube) -> None:
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-worker", cs(4)))
    assert kill_midway(kube, "vc-fa-worker", "pending-install", kill_worker=True), "helm finished too soon"
    tenant = ready(kube, "fa-worker", timeout=120)
    assert [s for _, s in history(pipeline, "vc-fa-worker")].count("deployed") == 1
    secret = json.loads(
        pipeline.kubectl("get", "secret", f"tenant-{cs(4)}-kubeconfig", "-n", TENANT_NAMESPACE, "-o", "json")
    )
    assert secret["metadata"]["labels"]["kubeopera.io/owner-uid"] == tenant.uid
    report("function (gunicorn worker) killed mid-install", tenant, started)


def test_duplicate_concurrent_deliveries_to_two_install_processes(
    pipeline: Stack, kube: Kube, adapter_down: None
) -> None:
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-twin", cs(5)))
    obj = json.loads(pipeline.kubectl("get", "kt", "fa-twin", "-n", TENANT_NAMESPACE, "-o", "json"))
    _, second = pipeline.start_replica("tenant-install")
    headers, body = events.to_binary(events.make(event_types.INSTALL, "router", Tenant.from_object(obj).ref))
    headers |= pipeline.delivery_authorization("tenant-install")  # the replica is told the same senders
    answers: list[int] = []
    barrier = threading.Barrier(2)

    def post(url: str) -> None:
        barrier.wait()
        answers.append(requests.post(url, headers=headers, data=body, timeout=60).status_code)

    threads = [threading.Thread(target=post, args=(u,)) for u in (pipeline.function_urls["tenant-install"], second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) in ([200, 503], [200, 200], [200, 204]), answers
    creates = [e for e in completed_requests(pipeline, "sh.helm.release.v1.vc-fa-twin.") if e["verb"] == "create"]
    assert len(creates) == 1, "one helm operation: one release record"
    start_adapter_again(pipeline)
    # install's reply went back to this test, not to a broker: the chain is resync's to resume,
    # once the Tenant has been Provisioning for longer than a poll.
    poll_quiet(kube, "fa-twin")
    tick(pipeline)
    report("duplicate concurrent deliveries to two install processes", ready(kube, "fa-twin"), started)


def test_a_deletion_while_install_creates_the_namespace_leaves_nothing_behind(
    pipeline: Stack, kube: Kube, adapter_down: None, tmp_path: Path
) -> None:
    """Issue 26 item 4: another install process has read the Tenant and is creating its namespace
    (that request held at an API gate) when the Tenant is deleted. cleanup answers "in hand"
    instead of finding no namespace and letting the Tenant go; once install is done, cleanup
    removes what it made. Nothing is left, and a new Tenant of the same name is Ready. (Without
    the lock, cleanup let the Tenant go at once and install created a namespace owned by a uid
    that no longer existed, which then kept the name from every later Tenant.)"""
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-race", cs(22)))
    first = Tenant.from_object(
        json.loads(pipeline.kubectl("get", "kt", "fa-race", "-n", TENANT_NAMESPACE, "-o", "json"))
    )
    assert pipeline.control_plane is not None
    spec = pipeline.function_specs["tenant-install"]
    cp = pipeline.control_plane
    with ApiGate(cp.url, cp.ca_file, hold=r"POST /api/v1/namespaces(\?.*)?", workdir=tmp_path) as gate:
        kubeconfig = gate.kubeconfig(Path(spec.env["KUBECONFIG"]), tmp_path / "install-through-the-gate")
        env = {"KUBECONFIG": str(kubeconfig)}
        replica, url = pipeline.start_replica("tenant-install", env=env, name="install-gated")
        try:
            answers: list[int] = []

            def deliver(url: str, event_type: str, service: str) -> requests.Response:
                headers, body = events.to_binary(events.make(event_type, "router", first.ref))
                headers |= pipeline.delivery_authorization(service)
                return requests.post(url, headers=headers, data=body, timeout=120)

            install = threading.Thread(
                target=lambda: answers.append(deliver(url, event_types.INSTALL, "tenant-install").status_code)
            )
            install.start()
            assert gate.held.wait(60), f"install never created the namespace: {gate.passed}"
            pipeline.kubectl("delete", "kt", "fa-race", "-n", TENANT_NAMESPACE, "--wait=false")
            cleanup = deliver(pipeline.function_urls["tenant-cleanup"], event_types.CLEANUP, "tenant-cleanup")
            assert cleanup.status_code == 503 and cleanup.json().get("inHand") is True, cleanup.text
            assert kube.get_tenant(TENANT_NAMESPACE, "fa-race") is not None, "the Tenant waits for its cleanup"
            gate.open()
            install.join(120)
            # It made the namespace and the release; its status write then found the deletion (a
            # new generation) and it answered 204, or it wrote Provisioning first and answered 200.
            assert answers in ([200], [204]), answers
        finally:
            replica.stop()
    assert exists(pipeline, "namespace", "vcluster-fa-race"), "install made the namespace after all"
    start_adapter_again(pipeline)
    tick(pipeline)  # the deletion, still to do, is re-driven
    wait_for("fa-race gone", lambda: kube.get_tenant(TENANT_NAMESPACE, "fa-race") is None, timeout=90)
    wait_for("vcluster-fa-race gone", lambda: not exists(pipeline, "namespace", "vcluster-fa-race"), timeout=60)
    assert not [r for r in helm(pipeline, "list", "--all-namespaces", "--all") if r["name"] == "vc-fa-race"]
    assert not exists(pipeline, "lease", "lock-vcluster-fa-race", "-n", TENANT_NAMESPACE)
    assert not exists(pipeline, "lease", f"cloudspace-{cs(22)}", "-n", TENANT_NAMESPACE)
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-race", cs(22)))
    report("Tenant deleted while install creates its namespace", ready(kube, "fa-race"), started)


def test_a_tenant_gone_without_its_cleanup_leaves_nothing_for_long(pipeline: Stack, kube: Kube) -> None:
    """Issue 26 item 4: a Ready Tenant's finalizer is removed by hand and the Tenant deleted, so no
    cleanup runs. resync's next pass finds its namespace by the owner labels (older than
    ORPHAN_GRACE_SECONDS) and sends it to cleanup, which removes the namespace and the stored
    kubeconfig; a new Tenant of that name then reaches Ready, where before it was Failed with
    "left behind by Tenant ... which no longer exists"."""
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-orphan", cs(23)))
    ready(kube, "fa-orphan")
    secret = f"tenant-{cs(23)}-kubeconfig"
    assert exists(pipeline, "secret", secret, "-n", TENANT_NAMESPACE)
    # Unseen by the router (which would send a Tenant without its finalizer to install, and install
    # would put it back): the adapter is down while a person removes it and deletes the Tenant.
    pipeline.stop_adapter()
    try:
        unfinalized = '{"metadata":{"finalizers":null}}'
        pipeline.kubectl("patch", "kt", "fa-orphan", "-n", TENANT_NAMESPACE, "--type=merge", "-p", unfinalized)
        pipeline.kubectl("delete", "kt", "fa-orphan", "-n", TENANT_NAMESPACE)
    finally:
        start_adapter_again(pipeline)
    assert exists(pipeline, "namespace", "vcluster-fa-orphan"), "left behind"
    # resync leaves a namespace younger than the grace alone: tick once it is older (the Tenant can
    # be Ready and deleted within the grace: CI of 66af823 ticked at 4 s)
    made = parse_time(
        pipeline.kubectl("get", "namespace", "vcluster-fa-orphan", "-o", "jsonpath={.metadata.creationTimestamp}")
    )
    assert made is not None
    time.sleep(max(0.0, ORPHAN_GRACE_SECONDS + 1.5 - (utcnow() - made).total_seconds()))
    tick(pipeline)
    wait_for("vcluster-fa-orphan gone", lambda: not exists(pipeline, "namespace", "vcluster-fa-orphan"), timeout=60)
    assert not exists(pipeline, "secret", secret, "-n", TENANT_NAMESPACE)
    log = (pipeline.log_dir() / "tenant-cleanup.log").read_text(errors="replace")
    assert "deleted a namespace left behind by a Tenant that no longer exists" in log
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-orphan", cs(23)))
    report("Tenant gone without its cleanup (finalizer removed by hand)", ready(kube, "fa-orphan"), started)


def test_a_vcluster_booted_with_the_wrong_service_range_is_never_ready(
    pipeline: Stack, kube: Kube, adapter_down: None
) -> None:
    """vcluster 0.21.2 on a 1.33+ host: an install told the wrong Service range (an install pod
    with ``SERVICE_CIDR=10.96.0.0/12``, the syncer's own fallback; the host's is 10.0.0.0/24) gives
    a vCluster that crash-loops: Failed at the timeout, never Ready. Retried with the right range
    (the real install), it boots, but keeps the range of its first boot: no ``kubernetes`` Service
    inside. Ready used to be declared there; now the Tenant is Failed again, saying so."""
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-range", cs(9)))
    obj = json.loads(pipeline.kubectl("get", "kt", "fa-range", "-n", TENANT_NAMESPACE, "-o", "json"))
    _, wrong = pipeline.start_replica("tenant-install", {"SERVICE_CIDR": "10.96.0.0/12"}, "tenant-install-range")
    headers, body = events.to_binary(events.make(event_types.INSTALL, "router", Tenant.from_object(obj).ref))
    headers |= pipeline.delivery_authorization("tenant-install")
    answer = requests.post(wrong, headers=headers, data=body, timeout=120)
    assert answer.status_code == 200, answer.text
    assert helm(pipeline, "get", "values", "vc-fa-range", "-n", "vcluster-fa-range")["serviceCIDR"] == "10.96.0.0/12"
    start_adapter_again(pipeline)
    poll_quiet(kube, "fa-range")
    tick(pipeline)  # install's reply came back to this test: resync resumes the chain

    failed = wait_for("fa-range Failed", lambda: phase_of(kube, "fa-range", "Failed"), timeout=TIMEOUT_SECONDS + 60)
    assert "waiting for StatefulSet vcluster-fa-range/vc-fa-range to roll out generation 1" in failed.status.message
    assert kube.get_secret(TENANT_NAMESPACE, f"tenant-{cs(9)}-kubeconfig") is None

    # The runbook's retry: the real install now, with the right range; a new StatefulSet generation.
    pending = json.dumps({"status": {"phase": "Pending"}})
    pipeline.kubectl(
        "patch", "kt", "fa-range", "-n", TENANT_NAMESPACE, "--subresource=status", "--type=merge", "-p", pending
    )
    kept = wait_for(
        "fa-range Failed again, on the range it kept",
        lambda: (
            t
            if (t := phase_of(kube, "fa-range", "Failed")) is not None
            and t.status.observed_generation == 1
            and "Service default/kubernetes does not exist" in t.status.message
            else None
        ),
        timeout=TIMEOUT_SECONDS + 90,
    )
    assert helm(pipeline, "get", "values", "vc-fa-range", "-n", "vcluster-fa-range")["serviceCIDR"] == "10.0.0.0/24"
    rollout = kube.get_rollout("vcluster-fa-range", "vc-fa-range")
    assert rollout is not None and rollout.done and rollout.generation == 2, "it booted: what Ready used to mean"
    ready_condition = kept.status.condition("Ready")
    assert ready_condition is not None and ready_condition.reason == "ProvisionTimeout"
    assert kube.get_secret(TENANT_NAMESPACE, f"tenant-{cs(9)}-kubeconfig") is None, "nothing handed over"
    report("vCluster first booted with the wrong Service range", kept, started)


def test_stored_kubeconfig_deleted(pipeline: Stack, kube: Kube) -> None:
    name = f"tenant-{cs(1)}-kubeconfig"
    before = json.loads(pipeline.kubectl("get", "secret", name, "-n", TENANT_NAMESPACE, "-o", "json"))
    started = time.monotonic()
    pipeline.kubectl("delete", "secret", name, "-n", TENANT_NAMESPACE)
    tick(pipeline)
    wait_for("the kubeconfig Secret back", lambda: exists(pipeline, "secret", name, "-n", TENANT_NAMESPACE))
    after = json.loads(pipeline.kubectl("get", "secret", name, "-n", TENANT_NAMESPACE, "-o", "json"))
    assert after["data"] == before["data"] and after["metadata"]["labels"] == before["metadata"]["labels"]
    tenant = kube.get_tenant(TENANT_NAMESPACE, "fa-adapter")
    assert tenant is not None
    report("stored kubeconfig Secret deleted", tenant, started)


def test_release_uninstalled_by_hand(pipeline: Stack, kube: Kube) -> None:
    before = kube.get_tenant(TENANT_NAMESPACE, "fa-broker")
    assert before is not None
    started = time.monotonic()
    # As tenant-cleanup: deploy/base's policy tenant-helm-records.yaml reserves helm's records in
    # vcluster-* for tenant-install and tenant-cleanup, so an admin's helm uninstall is refused.
    run(
        [
            str(pipeline.tools.helm),
            f"--kubeconfig={pipeline.function_kubeconfigs['tenant-cleanup']}",
            "uninstall",
            "vc-fa-broker",
            "-n",
            "vcluster-fa-broker",
        ]
    )
    tick(pipeline)
    wait_for("fa-broker back to Pending or Provisioning", lambda: not phase_of(kube, "fa-broker", "Ready"), timeout=30)
    tenant = ready(kube, "fa-broker")
    assert history(pipeline, "vc-fa-broker") == [(1, "deployed")]
    report("release uninstalled by hand", tenant, started)


def test_namespace_policies_deleted_by_hand(pipeline: Stack, kube: Kube) -> None:
    """An admin deletes the ResourceQuota and an egress NetworkPolicy of a Ready Tenant's namespace
    (the tenant's syncer may not: the chart's Role grants it neither). The release is untouched,
    so only resync sees it; install upgrades the release with the same values and helm makes them
    again, as they were."""
    namespace = "vcluster-fa-adapter"
    kinds = (("resourcequota", "vc-vc-fa-adapter"), ("networkpolicy", "vc-work-vc-fa-adapter"))

    def spec(kind: str, name: str) -> Any:
        return json.loads(pipeline.kubectl("get", kind, name, "-n", namespace, "-o", "json"))["spec"]

    before = {k: spec(*k) for k in kinds}
    started = time.monotonic()
    for kind, name in kinds:
        pipeline.kubectl("delete", kind, name, "-n", namespace)
    tick(pipeline)
    wait_for("fa-adapter taken back through install", lambda: not phase_of(kube, "fa-adapter", "Ready"), timeout=30)
    tenant = ready(kube, "fa-adapter")
    assert {k: spec(*k) for k in kinds} == before
    assert history(pipeline, "vc-fa-adapter")[-1][1] == "deployed"
    report("namespace policies deleted by hand", tenant, started)


def test_kubeopera_api_down_then_up(pipeline: Stack, kube: Kube) -> None:
    assert pipeline.api is not None
    started = time.monotonic()
    pipeline.api.set_mode("down")
    try:
        pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-api", cs(6)))
        tenant = ready(kube, "fa-api")
        callback = tenant.status.condition("CallbackDelivered")
        assert callback is not None and callback.status == "False"
    finally:
        pipeline.api.set_mode("ok")
    tick(pipeline)

    def delivered() -> Tenant | None:
        now = kube.get_tenant(TENANT_NAMESPACE, "fa-api")
        return now if now is not None and now.status.is_true("CallbackDelivered", now.generation) else None

    tenant = wait_for("the callback delivered after kubeopera-api came back", delivered, timeout=30)
    assert tenant.status.phase.value == "Ready"
    bodies = [json.loads(r.body) for r in pipeline.api.requests() if r.path.endswith(cs(6))]
    assert bodies[-1]["status"] == "active"
    report("kubeopera-api down, then up", tenant, started)


def test_a_lost_chain_past_the_timeout_is_failed_by_resync(pipeline: Stack, kube: Kube) -> None:
    """The vCluster never boots and the chain is lost with a restarted broker: nobody polls, so
    only resync sees the timeout pass."""
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("stuck-lost", cs(7)))
    wait_for("stuck-lost Provisioning", lambda: phase_of(kube, "stuck-lost", "Provisioning"), timeout=60)
    wait_for("check-ready's first poll", lambda: polls_of(pipeline, "stuck-lost"), timeout=30, interval=0.01)
    pipeline.restart_broker()
    time.sleep(TIMEOUT_SECONDS + 2)
    assert phase_of(kube, "stuck-lost", "Provisioning") is not None, "nothing polled it"
    tick(pipeline)
    failed = wait_for("stuck-lost Failed", lambda: phase_of(kube, "stuck-lost", "Failed"), timeout=30)
    assert failed.status.message.endswith("found by resync")
    ready = failed.status.condition("Ready")
    assert ready is not None and ready.reason == "ProvisionTimeout"
    report("chain lost, vCluster never boots: failed at the timeout by resync", failed, started)


def test_a_live_poll_is_left_alone_by_resync(pipeline: Stack, kube: Kube) -> None:
    """Issue 26 item 5: the poll is the broker's re-delivery and writes nothing, so resync took
    every Provisioning Tenant quiet for a poll for lost and started a second chain, on each pass
    (two chains poll twice, and can both tell kubeopera-api). check-ready now writes a heartbeat
    (``lastPolledAt``) every 4 polls: three passes over a vCluster that never boots, 3, 7 and 11 s
    into its provisioning (past the 6 polls after which a quiet chain counts as lost), start no
    chain; one chain polls until the timeout fails the Tenant."""
    name = "stuck-live"
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml(name, cs(25)))
    provisioning = wait_for(f"{name} Provisioning", lambda: phase_of(kube, name, "Provisioning"), timeout=60)
    began = parse_time(provisioning.status.last_synced_at)
    assert began is not None
    wait_for("check-ready's first poll", lambda: polls_of(pipeline, name), timeout=30, interval=0.01)
    for at in (3, 7, 11):
        wait_for(f"{at}s into provisioning", lambda at=at: time.time() - began.timestamp() >= at, timeout=20)
        tick(pipeline)
    polled = kube.get_tenant(TENANT_NAMESPACE, name)
    assert polled is not None and parse_time(polled.status.last_polled_at) is not None, "check-ready's heartbeat"
    failed = wait_for(f"{name} Failed", lambda: phase_of(kube, name, "Failed"), timeout=TIMEOUT_SECONDS + 30)
    assert pipeline.watch.wait_idle(60)
    chains = {d.event_id for d in polls_of(pipeline, name)}
    assert len(chains) == 1, f"resync started another poll chain: {chains}"
    report("a live poll chain, resync's passes during it: one chain, failed at the timeout", failed, started)


def marked(kube: Kube, name: str) -> Tenant | None:
    """The Tenant once a step (here: resync) has written its status, still Pending."""
    tenant = kube.get_tenant(TENANT_NAMESPACE, name)
    return tenant if tenant is not None and tenant.status.phase == "Pending" and tenant.status.last_synced_at else None


def test_a_tenant_install_never_gets_is_failed_at_the_timeout_and_a_retry_provisions_it(
    pipeline: Stack, kube: Kube
) -> None:
    """Issue 26 item 2: tenant-install's Trigger takes nothing (its filter broken by mistake), so
    the router's install event is dropped and nothing sees the Tenant: it is Pending only by the
    CRD's default. resync's pass marks it (``lastSyncedAt``: from then its provision timeout
    counts) and re-drives install, dropped too; the first pass past the timeout fails it, saying
    install never got to it. Before issue 26, it stayed without a phase, re-driven every pass, for
    ever. With the filter back, a retry by hand (only the phase patched to Pending, as the original
    operator's runbook has it) provisions it: install marks the retry, so its clock starts again
    (the failure's time is long past the timeout)."""
    name = "fa-no-install"
    started = time.monotonic()
    with trigger_filtered_away(pipeline, "tenant-install"):
        pipeline.kubectl("apply", "-f", "-", input=tenant_yaml(name, cs(24)))
        wait_for(
            f"the router's delivery for {name}",
            lambda: [
                d for d in pipeline.watch.deliveries() if d.trigger == "tenant-router" and name in (d.subject or "")
            ],
            timeout=30,
        )
        assert pipeline.watch.wait_idle(60)
        tenant = kube.get_tenant(TENANT_NAMESPACE, name)
        assert tenant is not None and lifecycle.unwritten(tenant), "no install took its event"
        assert not tenant.has_finalizer
        tick(pipeline)
        pending = wait_for(f"{name} marked by resync", lambda: marked(kube, name), timeout=30)
        accepted = parse_time(pending.status.last_synced_at)
        assert accepted is not None and pending.status.message == "waiting for install"
        wait_for(
            "the provision timeout to pass",
            lambda: time.time() - accepted.timestamp() > TIMEOUT_SECONDS + 1,
            timeout=TIMEOUT_SECONDS + 5,
        )
        tick(pipeline)
        failed = wait_for(f"{name} Failed", lambda: phase_of(kube, name, "Failed"), timeout=30)
    assert failed.status.message.startswith("still Pending "), failed.status.message
    assert failed.status.message.endswith("found by resync; last: waiting for install")
    condition = failed.status.condition("Ready")
    assert condition is not None and condition.reason == "ProvisionTimeout"
    report("install's Trigger takes nothing: Pending, failed at the timeout by resync", failed, started)

    retried = time.monotonic()
    patch = json.dumps({"status": {"phase": "Pending"}})
    pipeline.kubectl("patch", "kt", name, "-n", TENANT_NAMESPACE, "--subresource=status", "--type=merge", "-p", patch)
    tenant = ready(kube, name)
    report("... then its filter back and a retry by hand (phase patched to Pending)", tenant, retried)
    tick(pipeline)  # a pass now finds nothing to time out: the retry's mark, then Ready
    assert phase_of(kube, name, "Ready") is not None


def test_a_deletion_that_stops_moving_fails_saying_what_is_stuck(pipeline: Stack, kube: Kube) -> None:
    """Something in the Tenant's namespace holds a finalizer nobody removes (a stand-in for a pod
    that never terminates): the namespace stays Terminating. cleanup waits while the deletion moves
    and, once nothing has moved for CLEANUP_STALL_SECONDS, fails the Tenant (CleanupFailed) naming
    what the namespace controller still waits for. The hold removed and the runbook's retry done,
    the Tenant goes."""
    started = time.monotonic()
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("fa-hold", cs(10)))
    ready(kube, "fa-hold")
    hold = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "hold", "namespace": "vcluster-fa-hold", "finalizers": ["kubeopera.io/test-hold"]},
    }
    pipeline.kubectl("apply", "-f", "-", input=json.dumps(hold))
    pipeline.kubectl("delete", "kt", "fa-hold", "-n", TENANT_NAMESPACE, "--wait=false")

    failed = wait_for("fa-hold Failed", lambda: phase_of(kube, "fa-hold", "Failed"), timeout=STALL_SECONDS + 90)
    condition = failed.status.condition("Ready")
    assert condition is not None and condition.reason == "CleanupFailed"
    assert "nothing of the deletion moved for" in failed.status.message
    assert "kubeopera.io/test-hold" in failed.status.message, failed.status.message
    assert failed.has_finalizer, "the Tenant stays, holding its finalizer, for a person"

    pipeline.kubectl("patch", "configmap", "hold", "-n", "vcluster-fa-hold", "--type=merge", "-p",
                     '{"metadata": {"finalizers": null}}')  # fmt: skip
    pending = json.dumps({"status": {"phase": "Pending"}})
    pipeline.kubectl(
        "patch", "kt", "fa-hold", "-n", TENANT_NAMESPACE, "--subresource=status", "--type=merge", "-p", pending
    )
    wait_for("fa-hold gone", lambda: kube.get_tenant(TENANT_NAMESPACE, "fa-hold") is None, timeout=90)
    assert not exists(pipeline, "namespace", "vcluster-fa-hold")
    print(f"\nFAULT | a deletion that stops moving (a finalizer nobody removes) | CleanupFailed, then gone | "
          f"{time.monotonic() - started:.1f} s")  # fmt: skip


def test_resyncs_rbac_rules_are_all_used(pipeline: Stack) -> None:
    """After the faults above resync has re-driven, re-installed and timed out Tenants: every
    rule of deploy/base/rbac/tenant-resync.yaml shows up in the audit log."""
    assert pipeline.control_plane is not None
    assert unused_rules(pipeline.control_plane.audit_log, ["tenant-resync"], fold_required=False) == {}


def test_a_settled_pass_writes_nothing(pipeline: Stack, kube: Kube) -> None:
    """With every Tenant Ready and nothing drifted, a resync pass only reads."""
    assert pipeline.control_plane is not None
    assert pipeline.watch.wait_idle(60), f"still to be re-delivered: {pipeline.watch.pending()}"
    audit = pipeline.control_plane.audit_log
    mark = len(audit.read_text().splitlines())
    pipeline.resync()  # answered, and all it caused (nothing, if it writes nothing)
    new = [json.loads(line) for line in audit.read_text().splitlines()[mark:] if line.endswith("}")]
    ours = [e for e in new if e["user"]["username"].startswith("system:serviceaccount:kubeopera-system:")]
    # A TokenReview (the tick's sender check, made again once its cached answer has expired:
    # after a long enough gap since the last tick) is a question to the API server; it stores nothing.
    reviews = [e for e in ours if (e.get("objectRef") or {}).get("resource") == "tokenreviews"]
    writes = [e for e in ours if e["verb"] not in ("get", "list", "watch") and e not in reviews]
    assert writes == [], [(e["user"]["username"], e["verb"], e.get("objectRef")) for e in writes]
    assert len(reviews) <= 1, "one sender check for the one tick"
    readers = {"tenant-resync", "tenant-source", "tenant-vcluster-watch"}
    assert {e["user"]["username"].rsplit(":", 1)[1] for e in ours} <= readers


def test_nothing_is_left_behind(pipeline: Stack, kube: Kube) -> None:
    listed = json.loads(pipeline.kubectl("get", "kt", "-n", TENANT_NAMESPACE, "-o", "json"))
    names = [t["metadata"]["name"] for t in listed["items"]]
    for name in names:
        pipeline.kubectl("delete", "kt", name, "-n", TENANT_NAMESPACE, "--wait=false")
    for name in names:
        wait_for(f"{name} gone", lambda n=name: kube.get_tenant(TENANT_NAMESPACE, n) is None, timeout=120)
    namespaces = pipeline.kubectl("get", "namespaces", "-o", "name").split()
    assert [n for n in namespaces if n.startswith("namespace/vcluster-")] == []
    secrets = pipeline.kubectl("get", "secrets", "-A", "-o", "name").split()
    assert [s for s in secrets if "kubeconfig" in s or "sh.helm.release" in s] == []
    leases = pipeline.kubectl("get", "leases", "-n", TENANT_NAMESPACE, "-o", "name").split()
    assert [lease for lease in leases if "/cloudspace-" in lease] == [], "a cloudSpaceID claim outlived its Tenant"
    assert [lease for lease in pipeline.kubectl("get", "leases", "-A", "-o", "name").split() if "-helm" in lease] == []
