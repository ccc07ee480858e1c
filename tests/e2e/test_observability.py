"""A Tenant's whole life as a person on call sees it: metrics that add up, under several workers.

One stack whose functions run with two gunicorn workers each (``GUNICORN_WORKERS=2``: the
deliveries of one function land on either worker), provisions a Tenant, and compares what each
function's ``/metrics`` says with what the broker really delivered to it, read off the wire by the
test bed's service proxy. Last, every metric that deploy/monitoring's alerts and dashboard read
must be one the functions really export.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from deploy.monitoring import monitored_metric_names  # tests/deploy/monitoring.py
from shared.adapters.kube import Kube
from testbed.local.stack import Stack, StackOptions, start_stack

from .support import phase_of, tenant_yaml, wait_for

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
    polls = [d for d in pipeline.watch.deliveries() if d.service == "tenant-check-ready" and d.status == 503]

    assert total(install, HELM_OPS, operation="upgrade_install", outcome="installed") == 1
    assert total(install, "kubeopera_tenant_helm_operation_seconds_count", operation="upgrade_install") >= 1
    assert total(install, "kubeopera_tenant_chart_loads_total", source="registry") == 1
    assert total(install, TRANSITIONS, from_phase="Pending", to_phase="Provisioning") == 1
    assert total(check, "kubeopera_tenant_ready_polls_total") == len(polls) >= 1
    assert total(check, "kubeopera_tenant_time_to_ready_seconds_count") == 1
    assert total(notify, "kubeopera_tenant_callbacks_total", outcome="delivered") == 1
    assert total(notify, TRANSITIONS, from_phase="Provisioning", to_phase="Ready") == 1


def test_resync_counts_the_tenants_by_phase(pipeline: Stack, olive: str) -> None:
    pipeline.tick()
    assert pipeline.watch.wait_idle(timeout=30)
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
