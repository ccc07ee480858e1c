"""What every end-to-end module shares: ``kube``, an admin client of the API server of the
module's own ``pipeline`` (each module starts the stack it needs, with its own options), and the
report a failure carries.

When an end-to-end test fails, its report gains a section ``stack: what happened`` made by
:func:`testbed.local.diagnosis.explain` from the failing test's stack: every Tenant's status and
Events, and the broker's deliveries and the functions' log lines since the test started, so that
a red CI run is diagnosed from its log alone.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from testbed.admin_kube import AdminKube
from testbed.local.diagnosis import explain
from testbed.local.stack import Stack

_STARTED = pytest.StashKey[float]()


@pytest.fixture(scope="module")
def kube(pipeline: Stack) -> Iterator[AdminKube]:
    client = AdminKube.connect(pipeline.admin_kubeconfig)
    yield client
    client.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_STARTED] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed:
        return
    stack = getattr(item, "funcargs", {}).get("pipeline")
    if isinstance(stack, Stack):
        report.sections.append(("stack: what happened", explain(stack, since=item.stash.get(_STARTED, call.start))))
