"""The cluster tier's tests share one cluster: a real node with Knative Serving, Traefik and
Knative Eventing as pods, and the functions as Knative Services (``testbed.cluster``).

Started once per session (a few minutes), after ``make tools-cluster`` built the tools. The
readiness poll is shortened to 2 s, the autoscaler's windows to 20 s + 10 s; everything else is
``deploy/base`` as shipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.cluster.stack import ClusterOptions, ClusterStack, start_cluster
from testbed.node.preflight import missing


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterStack]:
    lacking = missing()
    if lacking:
        pytest.skip("the cluster tier cannot run on this machine: " + "; ".join(lacking))
    with start_cluster(ClusterOptions(function_config={"READY_POLL_SECONDS": "2"})) as stack:
        yield stack
