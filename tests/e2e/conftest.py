"""What every end-to-end module shares: ``kube``, an admin client of the API server of the
module's own ``pipeline`` (each module starts the stack it needs, with its own options)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.kube import Kube
from testbed.local.stack import Stack


@pytest.fixture(scope="module")
def kube(pipeline: Stack) -> Iterator[Kube]:
    client = Kube.connect(pipeline.admin_kubeconfig)
    yield client
    client.close()
