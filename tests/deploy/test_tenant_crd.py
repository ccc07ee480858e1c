"""The Tenant CRD's maximum quota lives in one place (the first rule of each quota field, its
quantity in the rule and in the message), the docs state the one it ships with, and the kustomize
way to change it works: ``deploy/crd`` is a kustomize root of the CRD alone, and the example overlay
``deploy/examples/quota-maximum`` changes the maximum and nothing else, into a CRD the API server
accepts (its CEL rules compile and are within the cost budget)."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .crd_quota import QUOTA_FIELDS, maxima, quota_schema
from .manifests import DEPLOY, REPO, documents, file_documents, kustomize

TENANT_CRD = DEPLOY / "crd" / "tenants.yaml"
EXAMPLE = DEPLOY / "examples" / "quota-maximum"
SHIPPED = {"cpu": "16", "memory": "64Gi"}


def shipped_crd() -> dict[str, Any]:
    (crd,) = file_documents(TENANT_CRD)
    return crd


def test_the_crd_ships_a_maximum_stated_once_per_field() -> None:
    assert maxima(shipped_crd()) == SHIPPED


@pytest.mark.parametrize("doc", ["README.md", "docs/deploy.md"])
def test_the_docs_state_the_shipped_maximum_and_how_to_change_it(doc: str) -> None:
    text = (REPO / doc).read_text(encoding="utf-8")
    assert f"at most `{SHIPPED['cpu']}` CPU and `{SHIPPED['memory']}` of memory" in text
    assert "deploy/examples/quota-maximum" in text


def test_deploy_crd_is_a_kustomize_root_of_the_crd_alone(kubectl: Path) -> None:
    assert documents(kustomize(kubectl, DEPLOY / "crd")) == [shipped_crd()]


def test_the_example_overlay_changes_the_maximum_and_nothing_else(kubectl: Path) -> None:
    (changed,) = documents(kustomize(kubectl, EXAMPLE))
    assert maxima(changed) == {"cpu": "32", "memory": "128Gi"}
    expected, got = shipped_crd(), copy.deepcopy(changed)
    for crd in (expected, got):
        for field in QUOTA_FIELDS:
            quota_schema(crd)["properties"][field]["x-kubernetes-validations"].pop(0)
    assert got == expected


def test_the_example_overlay_is_accepted_by_the_api_server(kubectl: Path, kube_admin_kubeconfig: Path) -> None:
    proc = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kube_admin_kubeconfig), "apply", "--dry-run=server", "--server-side",
         "--force-conflicts", "--field-manager=kubeopera-quota-example", "-k", str(EXAMPLE)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    crd = "customresourcedefinition.apiextensions.k8s.io/tenants.kubeopera.io"
    assert proc.stdout.strip() == f"{crd} serverside-applied (server dry run)"
