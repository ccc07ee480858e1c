"""The CRD, Knative's CRDs and everything the overlays render apply to a real API server
(the test bed's kube-apiserver) with a server-side dry run and strict field validation.

Knative's CRDs come from the Go module cache, at the versions the toolchain pins
(config/core/resources/*.yaml of knative.dev/eventing, config/core/300-resources/*.yaml of
knative.dev/serving): the same files a Knative release installs. Building tools/knative-check
put those modules there. A server-side dry run of a
namespaced object or of a Knative object needs its namespace and its CRD to exist, so after
their own dry run the CRDs and the two namespaces are created for real (server-side apply,
idempotent); every object of the overlays is then only dry-run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from shared.model.naming import DEFAULT_TENANT_NAMESPACE
from testbed import toolchain
from testbed.processes import until_conditions_exist

from .manifests import CONFIG_FEATURES_PATCH, DEPLOY, OVERLAYS, documents, file_documents

pytestmark = pytest.mark.integration

TENANT_CRD = DEPLOY / "crd" / "tenants.yaml"
KNATIVE_CRD_FOLDERS = {
    ("knative.dev/eventing", toolchain.KNATIVE_EVENTING_VERSION): "config/core/resources",
    ("knative.dev/serving", toolchain.KNATIVE_SERVING_VERSION): "config/core/300-resources",
}
NAMESPACES = (DEFAULT_TENANT_NAMESPACE, "knative-eventing")


def module_dir(module: str, version: str) -> Path:
    """The module's folder in the Go module cache. The knative_check fixture builds
    tools/knative-check against both modules first, which puts them there (verified then)."""
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, timeout=60)
    assert cache.returncode == 0, cache.stderr
    folder = Path(cache.stdout.strip()) / f"{module}@{version}"
    assert folder.is_dir(), f"{module}@{version} is not in the Go module cache ({folder})"
    return folder


def knative_crds() -> list[Path]:
    files: list[Path] = []
    for (module, version), folder in KNATIVE_CRD_FOLDERS.items():
        found = sorted((module_dir(module, version) / folder).glob("*.yaml"))
        assert found, f"no CRDs in {module}@{version}/{folder}"
        files += found
    return files


def kubectl_run(
    kubectl: Path, kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def dry_run(kubectl: Path, kubeconfig: Path, text: str) -> list[str]:
    """Server-side dry-run apply of a multi-document text; the lines kubectl printed."""
    proc = kubectl_run(kubectl, kubeconfig, "apply", "--dry-run=server", "--validate=strict", "-f", "-", stdin=text)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout.splitlines()


@pytest.fixture(scope="module")
def crds_and_namespaces(kubectl: Path, kube_admin_kubeconfig: Path, knative_check: Path) -> None:
    assert TENANT_CRD.is_file(), f"{TENANT_CRD} is missing"
    crd_files = [TENANT_CRD, *knative_crds()]
    text = "\n---\n".join(path.read_text(encoding="utf-8") for path in crd_files)
    crds = [doc for doc in documents(text) if doc["kind"] == "CustomResourceDefinition"]
    assert len(crds) == len(crd_files), "one CustomResourceDefinition per file"

    lines = dry_run(kubectl, kube_admin_kubeconfig, text)
    assert len(lines) == len(crds) and all("(server dry run)" in line for line in lines), lines

    namespaces = "".join(f"---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n" for ns in NAMESPACES)
    apply = kubectl_run(
        kubectl,
        kube_admin_kubeconfig,
        "apply",
        "--server-side",
        "--field-manager=kubeopera-deploy-test",
        "-f",
        "-",
        stdin=text + "\n" + namespaces,
    )
    assert apply.returncode == 0, apply.stderr
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    established = ("wait", "--for=condition=Established", "--timeout=120s", *names)
    wait = until_conditions_exist(lambda: kubectl_run(kubectl, kube_admin_kubeconfig, *established), 120)
    assert wait.returncode == 0, wait.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_applies_with_server_side_dry_run(
    kubectl: Path,
    kube_admin_kubeconfig: Path,
    crds_and_namespaces: None,
    rendered: Mapping[str, str],
    overlay: str,
) -> None:
    objects = documents(rendered[overlay])
    lines = dry_run(kubectl, kube_admin_kubeconfig, rendered[overlay])
    assert len(lines) == len(objects), lines
    assert all("(server dry run)" in line for line in lines), lines
    kinds = {doc["kind"] for doc in objects}
    assert {"Service", "Trigger", "Broker", "ApiServerSource", "ClusterRole"} <= kinds


def test_config_features_patch_applies_with_server_side_dry_run(
    kubectl: Path, kube_admin_kubeconfig: Path, crds_and_namespaces: None
) -> None:
    (patch,) = file_documents(CONFIG_FEATURES_PATCH)
    lines = dry_run(kubectl, kube_admin_kubeconfig, CONFIG_FEATURES_PATCH.read_text(encoding="utf-8"))
    assert lines == [f"configmap/{patch['metadata']['name']} created (server dry run)"]


def test_server_rejects_a_broken_object(
    kubectl: Path, kube_admin_kubeconfig: Path, crds_and_namespaces: None, rendered: Mapping[str, str]
) -> None:
    """The dry run can fail: Knative's CRD schema refuses an unknown field under strict validation."""
    service = next(doc for doc in documents(rendered["prod"]) if doc["kind"] == "Service")
    service["spec"]["template"]["spec"]["containerConcurency"] = 10  # sic
    proc = kubectl_run(
        kubectl,
        kube_admin_kubeconfig,
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        stdin=yaml.safe_dump(service),
    )
    assert proc.returncode != 0
    assert "containerConcurency" in proc.stderr
