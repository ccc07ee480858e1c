"""Fixtures of the integration tests that need the Tenant CRD on the test bed's API server.

- ``tenant_crd`` (session): ``deploy/crd/tenants.yaml`` applied as shipped (server-side, as
  docs/deploy.md says) and Established.
- ``custom_objects`` (session): a ``CustomObjectsApi`` of the admin client.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from testbed.controlplane import ControlPlane, kubectl

REPO = Path(__file__).resolve().parents[2]
TENANT_CRD = REPO / "deploy" / "crd" / "tenants.yaml"


@pytest.fixture(scope="session")
def tenant_crd(control_plane: ControlPlane) -> Path:
    kubectl(control_plane, "apply", "--server-side", "--field-manager=kubeopera-integration", "-f", str(TENANT_CRD))
    kubectl(control_plane, "wait", "--for=condition=Established", "--timeout=60s", "crd/tenants.kubeopera.io")
    return TENANT_CRD


@pytest.fixture(scope="session")
def custom_objects(kube_admin_kubeconfig: Path) -> Iterator[k8s.CustomObjectsApi]:
    api = k8s_config.new_client_from_config(config_file=str(kube_admin_kubeconfig))
    yield k8s.CustomObjectsApi(api)
    api.close()
