"""The stand-in chart renders, for each distro install may send (``VCLUSTER_DISTRO``), the init
containers of the real vcluster 0.21.2 chart, with the real helm CLI (``helm template``).

k3s: exactly the real render's (testbed/reference/vcluster-0.21.2/rendered-isolated.yaml). k8s: the
three of design.md section 5: the syncer image's ``/vcluster`` copied with a shell, then
kube-controller-manager and kube-apiserver from registry.k8s.io at the host's version. And the
values install sends for each pass the real chart's schema (tests/unit/test_values_schema.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.model.values import vcluster_values
from testbed.toolchain import Toolchain

from .test_isolation_render import REFERENCE, alice, render

pytestmark = pytest.mark.integration


def init_containers(text: str) -> list[dict[str, Any]]:
    (statefulset,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "StatefulSet"]
    spec = statefulset["spec"]["template"]["spec"]
    assert {"name": "binaries", "emptyDir": {}} in spec["volumes"]
    return list(spec["initContainers"])


def test_k3s_renders_the_real_charts_init_container(toolchain: Toolchain, tmp_path: Path) -> None:
    rendered = render(toolchain, vcluster_values(alice(), "development", distro="k3s"), tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    real = init_containers(REFERENCE.read_text(encoding="utf-8"))
    assert init_containers(rendered.stdout) == real
    assert real[0]["image"] == "rancher/k3s:v1.31.1-k3s1"


def test_k8s_renders_three_copies_at_the_hosts_version(toolchain: Toolchain, tmp_path: Path) -> None:
    rendered = render(toolchain, vcluster_values(alice(), "development", distro="k8s"), tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    containers = init_containers(rendered.stdout)
    assert [(c["name"], c["image"], c["command"], c["args"]) for c in containers] == [
        (
            "vcluster-copy",
            "ghcr.io/loft-sh/vcluster-pro:0.21.2",
            ["/bin/sh"],
            ["-c", "cp /vcluster /binaries/vcluster"],
        ),
        (
            "kube-controller-manager",
            "registry.k8s.io/kube-controller-manager:v1.34.4",  # render()'s --kube-version
            ["/binaries/vcluster"],
            ["cp", "/usr/local/bin/kube-controller-manager", "/binaries/kube-controller-manager"],
        ),
        (
            "kube-apiserver",
            "registry.k8s.io/kube-apiserver:v1.34.4",
            ["/binaries/vcluster"],
            ["cp", "/usr/local/bin/kube-apiserver", "/binaries/kube-apiserver"],
        ),
    ]
    assert all(c["volumeMounts"] == [{"name": "binaries", "mountPath": "/binaries"}] for c in containers)


def test_an_image_mirror_replaces_every_images_registry(toolchain: Toolchain, tmp_path: Path) -> None:
    """``controlPlane.advanced.defaultImageRegistry`` replaces the registry of every image, as the real
    chart's ``vcluster.image`` helper does (an air-gapped cluster's mirror)."""
    expected = {
        "k3s": ["mirror.example.com/rancher/k3s:v1.31.1-k3s1"],
        "k8s": [
            "mirror.example.com/loft-sh/vcluster-pro:0.21.2",
            "mirror.example.com/kube-controller-manager:v1.34.4",
            "mirror.example.com/kube-apiserver:v1.34.4",
        ],
    }
    for distro, images in expected.items():
        values = vcluster_values(alice(), "development", distro=distro)
        values["controlPlane"]["advanced"] = {"defaultImageRegistry": "mirror.example.com"}
        rendered = render(toolchain, values, tmp_path)
        assert rendered.returncode == 0, rendered.stderr
        assert [c["image"] for c in init_containers(rendered.stdout)] == images
