"""Fixtures of the integration tests that need the Tenant CRD on the test bed's API server.

- ``tenant_crd`` (session): ``deploy/crd/tenants.yaml`` applied as shipped (server-side, as
  docs/deploy.md says) and Established.
- ``custom_objects`` (session): a ``CustomObjectsApi`` of the admin client.
- ``helm`` (function): the helm adapter on the real helm CLI, the session's registry and API
  server; ``make_helm`` (function) makes one with another executable, chart version, cache or deadline.
- ``records`` (function): helm's release records read from the API, as check-ready reads them
  (and as the ``helm`` fixture's adapter reads them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from shared.adapters.helm import Helm
from shared.adapters.kube import Kube
from shared.adapters.release import ReleaseRecords
from testbed.controlplane import ControlPlane, kubectl, wait_established
from testbed.toolchain import Toolchain

REPO = Path(__file__).resolve().parents[2]
TENANT_CRD = REPO / "deploy" / "crd" / "tenants.yaml"


@pytest.fixture(scope="session")
def tenant_crd(control_plane: ControlPlane) -> Path:
    kubectl(control_plane, "apply", "--server-side", "--field-manager=kubeopera-integration", "-f", str(TENANT_CRD))
    wait_established(control_plane, "crd/tenants.kubeopera.io")
    return TENANT_CRD


@pytest.fixture(scope="session")
def custom_objects(kube_admin_kubeconfig: Path) -> Iterator[k8s.CustomObjectsApi]:
    api = k8s_config.new_client_from_config(config_file=str(kube_admin_kubeconfig))
    yield k8s.CustomObjectsApi(api)
    api.close()


@pytest.fixture
def records(kube_admin_kubeconfig: Path) -> Iterator[ReleaseRecords]:
    kube = Kube.connect(kube_admin_kubeconfig)
    yield ReleaseRecords(kube)
    kube.close()


MakeHelm = Callable[..., Helm]


@pytest.fixture
def make_helm(
    toolchain: Toolchain,
    chart_ref: str,
    helm_env: dict[str, str],
    kube_admin_kubeconfig: Path,
    records: ReleaseRecords,
    tmp_path: Path,
) -> MakeHelm:
    """The helm adapter on the session's registry and API server as admin, reading the release from
    ``records``: ``make_helm(executable=None, version="0.21.2", cache=None, deadline=None,
    validate_manifests=False)``, the real helm CLI unless another executable is given, the chart
    cached in ``cache`` (``tmp_path/charts``)."""

    def make(
        executable: str | None = None,
        version: str = "0.21.2",
        cache: Path | None = None,
        deadline: float | None = None,
        validate_manifests: bool = False,
    ) -> Helm:
        return Helm(
            chart_ref,
            version,
            cache or tmp_path / "charts",
            records=records,
            executable=executable or str(toolchain.helm),
            kubeconfig=kube_admin_kubeconfig,
            deadline=deadline,
            validate_manifests=validate_manifests,
        )

    return make


@pytest.fixture
def helm(make_helm: MakeHelm) -> Helm:
    """The real helm CLI, installing the stand-in chart from the test bed's registry as admin."""
    return make_helm()
