"""Fixtures of the deployment checks: the built tools (kubectl, tools/knative-check, both from
``testbed.toolchain``: built once into the cache outside the clone, a warm run builds
nothing) and the two kustomize overlays rendered once per session.

A check that needs one of these tools is marked ``integration`` here, so ``pytest -m "not
integration"`` runs only what needs no Go tool and takes seconds."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from testbed import toolchain

from .manifests import DEPLOY, OVERLAYS, kustomize

TOOL_FIXTURES = frozenset({"kubectl", "knative_check", "rendered", "installed_site"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if TOOL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kubectl() -> Path:
    return toolchain.ensure_all().kubectl


@pytest.fixture(scope="session")
def knative_check() -> Path:
    return toolchain.knative_check()


@pytest.fixture(scope="session")
def rendered(kubectl: Path) -> Mapping[str, str]:
    """overlay name -> `kubectl kustomize deploy/overlays/<name>` output."""
    return {name: kustomize(kubectl, DEPLOY / "overlays" / name) for name in OVERLAYS}
