"""Fixtures of the deployment checks: the built tools (kubectl, tools/knative-check, both from
``testbed.toolchain``: built once into the cache outside the clone, a warm run builds
nothing), the two kustomize overlays rendered once per session, and the runtime wheel built as
the Dockerfile builds it (and installed on its own into a folder).

A check that needs one of these tools is marked ``integration`` here, so ``pytest -m "not
integration"`` runs only what needs no Go tool and takes seconds."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from testbed import toolchain

from .manifests import DEPLOY, OVERLAYS, kustomize
from .wheel import build_wheel, install_wheel

TOOL_FIXTURES = frozenset({"kubectl", "knative_check", "rendered", "runtime_wheel", "installed_site"})


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


@pytest.fixture(scope="session")
def runtime_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runtime wheel, as the Dockerfile's ``wheel`` stage builds it."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def installed_site(runtime_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed on its own into a folder, the way the image installs it."""
    site = tmp_path_factory.mktemp("site")
    install_wheel(runtime_wheel, site)
    return site
