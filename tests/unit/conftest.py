"""The unit tests' adapters: in-memory fakes of the Kubernetes API, helm and kubeopera-api
(``tests/unit/fakes.py``), a fresh set per test."""

from __future__ import annotations

import pytest

from shared.steps import access

from .fakes import FakeHelm, FakeKube, FakeKubeoperaApi


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def helm(kube: FakeKube) -> FakeHelm:
    return FakeHelm(kube)


@pytest.fixture
def api() -> FakeKubeoperaApi:
    return FakeKubeoperaApi()


@pytest.fixture(autouse=True)
def _no_remembered_grants() -> None:
    """shared.steps.access remembers per process which grants it ensured; each test starts from none."""
    access.forget_ensured()
