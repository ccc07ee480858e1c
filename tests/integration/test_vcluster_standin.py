"""The vCluster stand-in, after its boot delay, reports each StatefulSet generation rolled out and
ready (as the StatefulSet controller and kubelet would), and writes ``vc-<release>`` as vcluster
0.21 does, honouring ``exportKubeConfig.server`` from the release's values (read from helm's own
record). An upgrade that changes the pod template boots again. Like the real vcluster 0.21.2 on a
v1.34 host, it never boots without the host's Service range in ``serviceCIDR``, nor with a range
that does not hold the cluster IP the host gave its Service."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from shared.helm import Helm
from shared.kube import Kube
from testbed.controlplane.startup import SERVICE_CLUSTER_IP_RANGE
from testbed.standins.vcluster import DEFAULT_SERVER, VClusterStandIn
from testbed.toolchain import Toolchain

pytestmark = pytest.mark.integration

HOST = {"serviceCIDR": SERVICE_CLUSTER_IP_RANGE}  # the test bed's Service range, as install sends it


@pytest.fixture
def kube(kube_admin_kubeconfig: Path) -> Iterator[Kube]:
    client = Kube.connect(kube_admin_kubeconfig)
    yield client
    client.close()


def secret_config(kube: Kube, namespace: str, release: str) -> dict[str, object] | None:
    raw = kube.read_secret_key(namespace, f"vc-{release}", "config")
    return yaml.safe_load(raw) if raw else None


def test_standin_boots_each_release_after_its_delay(
    toolchain: Toolchain,
    chart_ref: str,
    helm_env: dict[str, str],
    kube_admin_kubeconfig: Path,
    kube: Kube,
    test_namespace: str,
    tmp_path: Path,
) -> None:
    helm = Helm(
        chart_ref, "0.21.2", tmp_path / "charts", executable=str(toolchain.helm), kubeconfig=kube_admin_kubeconfig
    )
    server = f"https://vc-exported.{test_namespace}:443"
    helm.install_or_upgrade("vc-exported", test_namespace, HOST | {"exportKubeConfig": {"server": server}})
    helm.install_or_upgrade("vc-plain", test_namespace, HOST)

    standin = VClusterStandIn.connect(kube_admin_kubeconfig, boot_seconds=20)
    assert not [w for w in standin.step(now=1000.0) if w.startswith(f"{test_namespace}/")]
    assert secret_config(kube, test_namespace, "vc-exported") is None

    assert not [w for w in standin.step(now=1019.0) if w.startswith(f"{test_namespace}/")]
    written = [w for w in standin.step(now=1020.5) if w.startswith(f"{test_namespace}/")]
    assert sorted(written) == [f"{test_namespace}/vc-vc-exported", f"{test_namespace}/vc-vc-plain"]

    exported = secret_config(kube, test_namespace, "vc-exported")
    assert exported is not None
    assert exported["clusters"][0]["cluster"]["server"] == server  # type: ignore[index]
    assert exported["current-context"] == "my-vcluster"
    plain = secret_config(kube, test_namespace, "vc-plain")
    assert plain is not None and plain["clusters"][0]["cluster"]["server"] == DEFAULT_SERVER  # type: ignore[index]
    ca = kube.read_secret_key(test_namespace, "vc-vc-plain", "certificate-authority")
    assert ca is not None and ca.startswith(b"-----BEGIN CERTIFICATE-----")
    assert base64.b64decode(
        plain["clusters"][0]["cluster"]["certificate-authority-data"]  # type: ignore[index]
    ).startswith(b"-----BEGIN CERTIFICATE-----")

    rollout = kube.get_rollout(test_namespace, "vc-plain")
    assert rollout is not None and rollout.done and (rollout.generation, rollout.ready_replicas) == (1, 1)

    # Booted once: a later poll writes nothing again.
    assert not [w for w in standin.step(now=1100.0) if w.startswith(f"{test_namespace}/")]

    # An upgrade that changes the pod template is a new generation: not ready until it boots.
    resources = {"requests": {"cpu": "3"}, "limits": {"cpu": "3"}}
    helm.install_or_upgrade(
        "vc-plain", test_namespace, HOST | {"controlPlane": {"statefulSet": {"resources": resources}}}
    )
    upgraded = kube.get_rollout(test_namespace, "vc-plain")
    assert upgraded is not None and upgraded.generation == 2 and not upgraded.done
    assert not [w for w in standin.step(now=1110.0) if w.startswith(f"{test_namespace}/")]
    assert [w for w in standin.step(now=1131.0) if w.startswith(f"{test_namespace}/")] == [
        f"{test_namespace}/vc-vc-plain"
    ]
    booted = kube.get_rollout(test_namespace, "vc-plain")
    assert booted is not None and booted.done and booted.observed_generation == 2


@pytest.mark.parametrize(
    ("values", "logged"),
    [
        pytest.param(
            {}, ["failed to detect service CIDR, will fallback to 10.96.0.0/12", "failed to allocate IP"], id="none"
        ),
        pytest.param({"serviceCIDR": "10.96.0.0/12"}, ["failed to allocate IP"], id="not-the-hosts"),
    ],
)
def test_standin_never_boots_without_the_hosts_service_range(
    toolchain: Toolchain,
    chart_ref: str,
    kube_admin_kubeconfig: Path,
    kube: Kube,
    test_namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    values: dict[str, str],
    logged: list[str],
) -> None:
    helm = Helm(
        chart_ref, "0.21.2", tmp_path / "charts", executable=str(toolchain.helm), kubeconfig=kube_admin_kubeconfig
    )
    helm.install_or_upgrade("vc-wrong", test_namespace, values)
    standin = VClusterStandIn.connect(kube_admin_kubeconfig, boot_seconds=0)

    for moment in (1000.0, 1001.0, 1500.0):
        assert not [w for w in standin.step(now=moment) if w.startswith(f"{test_namespace}/")]

    assert secret_config(kube, test_namespace, "vc-wrong") is None
    rollout = kube.get_rollout(test_namespace, "vc-wrong")
    assert rollout is not None and not rollout.done
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "ERROR" and getattr(r, "namespace", None) == test_namespace
    ]
    assert len(errors) == len(logged), f"logged once per generation, not per poll: {errors}"
    for message, part in zip(errors, logged, strict=True):
        assert part in message, errors
    assert errors[-1].endswith("the provided network does not match the current range")
