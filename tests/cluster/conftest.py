"""The cluster tier's tests share one cluster: a real node with Knative Serving, Traefik and
Knative Eventing as pods, and the functions as Knative Services (``testbed.cluster``).

Started once per session (a few minutes), after ``make tools-cluster`` built the tools. The
readiness poll is shortened to 2 s, the autoscaler's windows to 20 s + 10 s; everything else is
``deploy/base`` as shipped.

When a test fails, its report gains a section ``cluster: what happened``: every Tenant's status
and Events, and the functions' log lines since the test started, from every pod they ran in
(kept by :class:`~testbed.cluster.podlogs.PodLogs`, since a pod scaled to zero takes its logs).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from testbed.cluster.stack import ClusterOptions, ClusterStack, start_cluster
from testbed.local.diagnosis import event_lines, function_log_lines, report, tenant_lines
from testbed.node.preflight import missing


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterStack]:
    lacking = missing()
    if lacking:
        pytest.skip("the cluster tier cannot run on this machine: " + "; ".join(lacking))
    with start_cluster(ClusterOptions(function_config={"READY_POLL_SECONDS": "2"})) as stack:
        yield stack


_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_STARTED] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    result: pytest.TestReport = outcome.get_result()
    stack = getattr(item, "funcargs", {}).get("cluster")
    if not result.failed or not isinstance(stack, ClusterStack):
        return
    since = item.stash.get(_STARTED, call.start)
    sections = [
        ("Tenants now", lambda: tenant_lines(stack)),
        ("Tenant Events", lambda: event_lines(stack)),
        ("function lines since the test started", lambda: function_log_lines(stack.pod_logs, stack.services, since)),
    ]
    result.sections.append(("cluster: what happened", report(sections, max_lines=120)))
