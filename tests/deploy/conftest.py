"""Fixtures of the deployment checks: the built tools (kubectl, tools/knative-check, both from
``shared.testbed.toolchain``: built once into the cache outside the clone, a warm run builds
nothing) and the two kustomize overlays rendered once per session."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from shared.testbed import toolchain

from .manifests import DEPLOY, OVERLAYS, kustomize


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
