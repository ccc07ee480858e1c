"""A Tenant's whole life as a person on call sees it: metrics that add up, under several workers.

One stack whose functions run with two gunicorn workers each (``GUNICORN_WORKERS=2``: the
deliveries of one function land on either worker), provisions a Tenant, and compares what each
function's ``/metrics`` says with what the broker really delivered to it, read off the wire by the
test bed's service proxy. Every metric that deploy/monitoring's alerts and dashboard read must be
one the functions really export. Last, the Tenant's vCluster goes down after Ready and comes back
(the stand-in's fault), and the condition, Event, column and gauge follow it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Mapping

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from deploy.monitoring import monitored_metric_names  # tests/deploy/monitoring.py
from shared.adapters.kube import Kube
from shared.model import event_types
from shared.model.tenant import COND_AVAILABLE
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, start_stack
from testbed.standins.vcluster import API_ANNOTATION, CONTROL_PLANE_ANNOTATION

from .support import phase_of, tenant_events, tenant_yaml, wait_for

pytestmark = pytest.mark.integration

WORKERS = 2
CS_OLIVE = "0b5e6f7a-8b9c-4d0e-9f1a-2b3c4d5e6f70"
DELIVERIES = "kubeopera_tenant_deliveries_total"
HELM_OPS = "kubeopera_tenant_helm_operations_total"
TRANSITIONS = "kubeopera_tenant_phase_transitions_total"


@pytest.fixture(scope="module")
def pipeline() -> Iterator[Stack]:
    options = StackOptions(
        vcluster_boot_seconds=3.0,
        ready_poll_seconds=1,
        function_env={"GUNICORN_WORKERS": str(WORKERS)},
    )
    with start_stack(options) as stack:
        yield stack


@pytest.fixture(scope="module")
def olive(pipeline: Stack, kube: Kube) -> str:
    pipeline.kubectl("apply", "-f", "-", input=tenant_yaml("olive", CS_OLIVE))
    wait_for("olive to be Ready", lambda: phase_of(kube, "olive", "Ready"), timeout=180)
    assert pipeline.watch.wait_idle(timeout=30), f"the broker still has work: {pipeline.watch.pending()}"
    return "olive"


def scrape(url: str) -> dict[str, list[tuple[Mapping[str, str], float]]]:
    """``/metrics`` of one function: sample name -> [(labels, value)]."""
    session = requests.Session()
    session.trust_env = False
    text = session.get(f"{url.rstrip('/')}/metrics", timeout=10).text
    samples: dict[str, list[tuple[Mapping[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def total(samples: Mapping[str, list[tuple[Mapping[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for found, v in samples.get(name, []) if all(found.get(k) == want for k, want in labels.items()))


def test_every_function_runs_two_workers(pipeline: Stack, olive: str) -> None:
    for service in pipeline.functions:
        log = (pipeline.log_dir() / f"{service}.log").read_text(errors="replace")
        assert log.count("Booting worker with pid") >= WORKERS, service


def test_scraped_totals_equal_the_deliveries_made(pipeline: Stack, olive: str) -> None:
    delivered = Counter(d.service for d in pipeline.watch.deliveries())
    by_code = Counter((d.service, d.type, str(d.status)) for d in pipeline.watch.deliveries())
    assert delivered["tenant-install"] and delivered["tenant-check-ready"] >= 2, delivered  # a poll, then Ready
    for service, url in pipeline.function_urls.items():
        samples = scrape(url)
        controller = service.removeprefix("tenant-")
        assert total(samples, "controller_runtime_reconcile_total", controller=controller) == delivered[service]
        assert (
            total(samples, "controller_runtime_reconcile_time_seconds_count", controller=controller)
            == (delivered[service])
        )
        assert total(samples, DELIVERIES, function=controller) == delivered[service]
        for (svc, event_type, code), count in by_code.items():
            if svc == service:
                found = total(samples, DELIVERIES, function=controller, type=event_type, code=code)
                assert found == count, (service, event_type, code)


def test_what_happened_to_the_tenant_is_counted(pipeline: Stack, olive: str) -> None:
    install = scrape(pipeline.function_urls["tenant-install"])
    check = scrape(pipeline.function_urls["tenant-check-ready"])
    notify = scrape(pipeline.function_urls["tenant-notify-api"])
    # A poll is the provisioning event answered 503; a look at a StatefulSet change may answer 503
    # too (ask again in a second), and that is not a poll.
    polls = [
        d
        for d in pipeline.watch.deliveries()
        if d.service == "tenant-check-ready" and d.type == event_types.PROVISIONING and d.status == 503
    ]

    assert total(install, HELM_OPS, operation="upgrade_install", outcome="installed") == 1
    assert total(install, "kubeopera_tenant_helm_operation_seconds_count", operation="upgrade_install") >= 1
    assert total(install, "kubeopera_tenant_chart_loads_total", source="registry") == 1
    assert total(install, TRANSITIONS, from_phase="Pending", to_phase="Provisioning") == 1
    assert total(check, "kubeopera_tenant_ready_polls_total") == len(polls) >= 1
    assert total(check, "kubeopera_tenant_time_to_ready_seconds_count") == 1
    assert total(notify, "kubeopera_tenant_callbacks_total", outcome="delivered") == 1
    assert total(notify, TRANSITIONS, from_phase="Provisioning", to_phase="Ready") == 1


def test_resync_counts_the_tenants_by_phase(pipeline: Stack, olive: str) -> None:
    pipeline.resync()  # the tick answered by resync, then the broker idle (a tick alone can be scraped before it)
    resync = scrape(pipeline.function_urls["tenant-resync"])
    assert total(resync, "kubeopera_tenants", phase="Ready") == 1
    assert total(resync, "kubeopera_tenants", phase="Failed") == 0


def test_every_metric_the_alerts_and_dashboard_read_is_exported(pipeline: Stack, olive: str) -> None:
    """Scraped, not listed by hand. A malformed event to each function first, so that the error
    counters have a value too (a pod's series start at zero, but a function that never saw an
    error still exports its error counter)."""
    session = requests.Session()
    session.trust_env = False
    for service, url in pipeline.function_urls.items():
        answer = session.post(url, headers=pipeline.delivery_authorization(service), data=b"not an event", timeout=10)
        assert answer.status_code == 400, (service, answer.text)
    exported: set[str] = set()
    for url in pipeline.function_urls.values():
        exported |= set(scrape(url))
    missing = {name: sorted(where) for name, where in monitored_metric_names().items() if name not in exported}
    assert missing == {}


def available(kube: Kube, name: str) -> tuple[str, str] | None:
    tenant = kube.get_tenant(TENANT_NAMESPACE, name)
    condition = tenant.status.condition(COND_AVAILABLE) if tenant is not None else None
    return None if condition is None else (condition.status, condition.reason)


def control_plane(pipeline: Stack, kube: Kube, name: str, state: str | None) -> None:
    """The stand-in's fault switched: ``not-ready`` takes the vCluster's pod down, None brings it back."""
    annotation = CONTROL_PLANE_ANNOTATION + (f"={state}" if state else "-")
    pipeline.kubectl("annotate", "statefulset", f"vc-{name}", "-n", f"vcluster-{name}", "--overwrite", annotation)
    want = 0 if state else 1
    wait_for(
        f"vc-{name} with {want} ready pod(s)",
        lambda: (r := kube.get_rollout(f"vcluster-{name}", f"vc-{name}")) is not None and r.ready_replicas == want,
        timeout=30,
    )


def test_a_vcluster_that_goes_down_after_ready_is_said_unavailable_and_available_again(
    pipeline: Stack, kube: Kube, olive: str
) -> None:
    """Truth after Ready: the condition, its Event, the column, the gauge the alert reads, and
    ``kubectl wait`` on both conditions; resync's tick is sent by the test (Stack.tick)."""
    assert available(kube, olive) == ("True", "ControlPlaneReady")  # written with Ready
    pipeline.kubectl("wait", "--for=condition=Ready", f"tenant/{olive}", "-n", TENANT_NAMESPACE, "--timeout=10s")
    started = time.monotonic()
    timeline: list[tuple[float, str]] = []  # the health timeline of this fault run, for the report

    def seen(what: str) -> None:
        timeline.append((time.monotonic() - started, what))

    seen("fault: stand-in control plane annotated not-ready")
    control_plane(pipeline, kube, olive, "not-ready")
    seen("StatefulSet readyReplicas 0")
    # heard from the StatefulSet's change (the vCluster watch, check-ready's look): no resync tick
    pipeline.kubectl(
        "wait", "--for=condition=VClusterAvailable=False", f"tenant/{olive}", "-n", TENANT_NAMESPACE, "--timeout=30s"
    )
    seen("kubectl wait: VClusterAvailable=False (ControlPlaneNotReady), phase still Ready, no resync tick")
    assert available(kube, olive) == ("False", "ControlPlaneNotReady")
    assert any(
        d.trigger == "tenant-check-ready-hint" and d.subject == f"{TENANT_NAMESPACE}/{olive}"
        for d in pipeline.watch.deliveries()
    ), "the look at the change wrote it"
    pipeline.tick()  # resync counts it for the gauge
    assert pipeline.watch.wait_idle(timeout=30)
    tenant = kube.get_tenant(TENANT_NAMESPACE, olive)
    assert tenant is not None and tenant.status.phase == "Ready"  # the phase says what provisioning reached
    down = [e for e in tenant_events(pipeline, olive) if e["reason"] == "VClusterUnavailable"]
    assert [e["type"] for e in down] == ["Warning"]
    assert "no pod of the vCluster's control plane is ready (0/1 ready)" in down[0]["message"]
    printed = pipeline.kubectl("get", "kt", olive, "-n", TENANT_NAMESPACE).split("\n")
    assert printed[0].split()[4] == "AVAILABLE" and printed[1].split()[4] == "False", printed
    resync = scrape(pipeline.function_urls["tenant-resync"])
    assert total(resync, "kubeopera_tenant_vclusters", available="false") == 1
    assert total(resync, "kubeopera_tenant_vclusters", available="true") == 0

    seen("resync pass: gauge kubeopera_tenant_vclusters{available=false} 1")
    control_plane(pipeline, kube, olive, None)
    seen("recovered: StatefulSet readyReplicas 1")
    pipeline.tick()
    assert pipeline.watch.wait_idle(timeout=30)
    pipeline.kubectl(
        "wait", "--for=condition=VClusterAvailable=True", f"tenant/{olive}", "-n", TENANT_NAMESPACE, "--timeout=30s"
    )
    seen("kubectl wait: VClusterAvailable=True (ControlPlaneReady)")
    rows = "\n".join(f"{at:7.2f}  {what}" for at, what in timeline)
    print(f"\nhealth timeline of a fault run (s from the fault):\n{rows}")
    assert available(kube, olive) == ("True", "ControlPlaneReady")
    assert [e["reason"] for e in tenant_events(pipeline, olive)][-1] == "VClusterAvailable"
    resync = scrape(pipeline.function_urls["tenant-resync"])
    assert total(resync, "kubeopera_tenant_vclusters", available="true") == 1


def test_a_vcluster_whose_api_stops_answering_is_said_unavailable_at_the_next_pass(
    pipeline: Stack, kube: Kube, olive: str
) -> None:
    """Its pod still ready, its API refusing every connection (the stand-in's switch): resync asks
    it through the stored kubeconfig on its pass, and says so; answering again, True again."""
    statefulset = ("statefulset", f"vc-{olive}", "-n", f"vcluster-{olive}", "--overwrite")
    standin_log = pipeline.run_dir / "logs" / "vcluster-standin.log"

    def switched(message: str) -> int:
        return sum(message in line and f"vc-{olive}" in line for line in standin_log.read_text().splitlines())

    downs = switched('"API down"')
    pipeline.kubectl("annotate", *statefulset, f"{API_ANNOTATION}=down")
    try:
        wait_for("the stand-in's API of olive down", lambda: switched('"API down"') > downs, timeout=30)
        pipeline.resync()
        assert available(kube, olive) == ("False", "APINotServing")
        tenant = kube.get_tenant(TENANT_NAMESPACE, olive)
        assert tenant is not None and tenant.status.phase == "Ready"
        condition = tenant.status.condition("VClusterAvailable")
        assert condition is not None, "the condition is kept"
        assert condition.message.startswith(f"the vCluster's API at https://vc-{olive}.vcluster-{olive}.svc:443 ")
        assert "cannot be reached with the stored kubeconfig: TLS: " in condition.message, condition.message
        assert [e["reason"] for e in tenant_events(pipeline, olive)][-1] == "VClusterUnavailable"
    finally:
        ups = switched('"API up again"')
        pipeline.kubectl("annotate", *statefulset, f"{API_ANNOTATION}-")
    wait_for("the stand-in's API of olive up", lambda: switched('"API up again"') > ups, timeout=30)
    pipeline.resync()
    assert available(kube, olive) == ("True", "ControlPlaneReady")
