"""The vCluster stand-in, after its boot delay, reports each StatefulSet generation rolled out and
ready (as the StatefulSet controller and kubelet would), and writes ``vc-<release>`` as vcluster
0.21 does, honouring ``exportKubeConfig.server`` from the release's values (read from helm's own
record). An upgrade that changes the pod template boots again. Like the real vcluster 0.21.2 on a
v1.34 host, it never boots without the host's Service range in ``serviceCIDR``, nor with a range
that does not hold the cluster IP the host gave its Service. Its API answers check-ready's probe
(shared.adapters.vcluster_api) through the exported kubeconfig over TLS, and fails it where the real one
would: down, a certificate without the asked name, another vCluster's credentials, and a range kept
from a first boot that crashed. Its certificates live in Secret ``<release>-certs``, as the real
one's do: a restart without that Secret issues new ones."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from shared.adapters.helm import Helm
from shared.adapters.kube import Kube
from shared.adapters.vcluster_api import VClusterApi
from testbed.controlplane.startup import SERVICE_CLUSTER_IP_RANGE
from testbed.standins.service_proxy import ServiceProxy
from testbed.standins.vcluster import DEFAULT_SERVER, Faults, VClusterStandIn
from testbed.standins.vcluster_api import VirtualApiServer

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
    helm: Helm,
    helm_env: dict[str, str],
    kube_admin_kubeconfig: Path,
    kube: Kube,
    test_namespace: str,
) -> None:
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
    helm: Helm,
    kube_admin_kubeconfig: Path,
    kube: Kube,
    test_namespace: str,
    caplog: pytest.LogCaptureFixture,
    values: dict[str, str],
    logged: list[str],
) -> None:
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


# --------------------------------------------------------------------------- its API, as check-ready asks it


@pytest.fixture
def api_server() -> Iterator[VirtualApiServer]:
    server = VirtualApiServer().start()
    yield server
    server.stop()


@pytest.fixture
def cluster_network(api_server: VirtualApiServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServiceProxy]:
    """A client's way to https://<name>.svc:443: the service proxy's CONNECT tunnel to the stand-in's API."""
    with ServiceProxy() as proxy:
        proxy.tunnels.add_suffix(".svc", api_server.port)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # the API server stays direct, as for the functions
        monkeypatch.delenv("no_proxy", raising=False)
        yield proxy


def values_for(release: str, namespace: str, **more: object) -> dict[str, object]:
    """What install sends that the API depends on: the range, the server, the extra certificate names."""
    svc = f"{release}.{namespace}.svc"
    return (
        HOST
        | {
            "exportKubeConfig": {"server": f"https://{svc}:443"},
            "controlPlane": {"proxy": {"extraSANs": [svc, f"{svc}.cluster.local"]}},
        }
        | more
    )


def test_a_booted_vcluster_answers_through_exactly_the_kubeconfig_it_exported(
    helm: Helm,
    kube_admin_kubeconfig: Path,
    kube: Kube,
    test_namespace: str,
    api_server: VirtualApiServer,
    cluster_network: ServiceProxy,
) -> None:
    for release in ("vc-good", "vc-down", "vc-short"):
        helm.install_or_upgrade(release, test_namespace, values_for(release, test_namespace))
    faults = Faults(api_down="vc-down", short_names="vc-short")
    standin = VClusterStandIn.connect(kube_admin_kubeconfig, boot_seconds=0, faults=faults, api=api_server)
    standin.step(now=1000.0)

    good = kube.read_secret_key(test_namespace, "vc-vc-good", "config")
    assert good is not None
    assert VClusterApi().missing(good) is None
    tunnels = [f"vc-good.{test_namespace}.svc"]  # a hop is recorded once its tunnel closed: wait for it
    assert cluster_network.wait(lambda hops: [h.host for h in hops if h.method == "CONNECT"] == tunnels, timeout=10), (
        cluster_network.hops()
    )

    down = kube.read_secret_key(test_namespace, "vc-vc-down", "config")
    assert down is not None
    assert (VClusterApi().missing(down) or "").startswith(
        f"the vCluster's API at https://vc-down.{test_namespace}.svc:443 cannot be reached with the stored kubeconfig: "
    )

    short = kube.read_secret_key(test_namespace, "vc-vc-short", "config")
    assert short is not None
    missing = VClusterApi().missing(short) or ""
    assert "cannot be reached with the stored kubeconfig: TLS: " in missing and "Hostname mismatch" in missing, missing

    # Another vCluster's credentials: its CA does not vouch for this server, its certificate is not this CA's.
    other = yaml.safe_load(good)
    foreign = yaml.safe_load(short)
    other["clusters"][0]["cluster"]["certificate-authority-data"] = foreign["clusters"][0]["cluster"][
        "certificate-authority-data"
    ]
    assert "certificate verify failed" in (VClusterApi().missing(yaml.safe_dump(other).encode()) or "")
    other = yaml.safe_load(good)
    other["users"][0]["user"] = foreign["users"][0]["user"]
    assert "cannot be reached with the stored kubeconfig: TLS: " in (
        VClusterApi().missing(yaml.safe_dump(other).encode()) or ""
    )


def test_a_vcluster_that_first_booted_with_the_wrong_range_works_nowhere_after_the_fix(
    helm: Helm,
    kube_admin_kubeconfig: Path,
    kube: Kube,
    test_namespace: str,
    api_server: VirtualApiServer,
    cluster_network: ServiceProxy,
) -> None:
    """The real vcluster 0.21.2 keeps the range of its first boot on its PVC: upgraded with the right
    ``serviceCIDR`` it runs and exports its kubeconfig, but has no ``kubernetes`` Service and no DNS."""
    wrong = values_for("vc-kept", test_namespace)
    del wrong["serviceCIDR"]
    helm.install_or_upgrade("vc-kept", test_namespace, wrong)
    standin = VClusterStandIn.connect(kube_admin_kubeconfig, boot_seconds=0, api=api_server)
    assert not [w for w in standin.step(now=1000.0) if w.startswith(f"{test_namespace}/")]

    fixed = values_for("vc-kept", test_namespace)
    fixed["controlPlane"] = dict(fixed["controlPlane"]) | {  # type: ignore[arg-type]
        "statefulSet": {"resources": {"requests": {"cpu": "1"}}}  # a new pod template: a new generation
    }
    helm.install_or_upgrade("vc-kept", test_namespace, fixed)
    assert [w for w in standin.step(now=1001.0) if w.startswith(f"{test_namespace}/")] == [
        f"{test_namespace}/vc-vc-kept"
    ]
    config = kube.read_secret_key(test_namespace, "vc-vc-kept", "config")
    assert config is not None
    assert VClusterApi().missing(config) == (
        f"the vCluster's API at https://vc-kept.{test_namespace}.svc:443: Service default/kubernetes does not exist "
        "(GET /api/v1/namespaces/default/services/kubernetes answered 404)"
    )


def test_a_restart_without_the_certificates_secret_issues_new_ones_and_the_old_are_refused(
    helm: Helm,
    kube_admin_kubeconfig: Path,
    kube: Kube,
    test_namespace: str,
    api_server: VirtualApiServer,
    cluster_network: ServiceProxy,
) -> None:
    """vcluster 0.21.2 keeps its certificates in Secret ``<release>-certs`` (its /pki is an
    emptyDir): a restart reads them back, deleting the Secret alone changes nothing, and a restart
    without it makes a new CA, whose kubeconfig works while the old one's credentials are refused
    (what ``kubeopera-tenants rotate`` relies on)."""
    helm.install_or_upgrade("vc-rot", test_namespace, values_for("vc-rot", test_namespace))
    standin = VClusterStandIn.connect(kube_admin_kubeconfig, boot_seconds=0, api=api_server)
    standin.step(now=1000.0)
    first = kube.read_secret_key(test_namespace, "vc-vc-rot", "config")
    certs = kube.get_secret(test_namespace, "vc-rot-certs")
    assert first is not None and certs is not None
    assert certs.labels == {"app": "vcluster", "vcluster-name": "vc-rot"}
    assert {"ca.crt", "ca.key", "admin.conf"} <= set(certs.data)
    assert VClusterApi().missing(first) is None

    generation = kube.restart_rollout(test_namespace, "vc-rot", "2026-12-02T19:00:00Z")
    assert generation == 2
    assert [w for w in standin.step(now=1001.0) if w.startswith(f"{test_namespace}/")] == [
        f"{test_namespace}/vc-vc-rot"
    ]
    assert kube.read_secret_key(test_namespace, "vc-vc-rot", "config") == first  # the Secret's certificates
    assert VClusterApi().missing(first) is None

    kube.delete_secret(test_namespace, "vc-rot-certs", certs.resource_version)
    standin.step(now=1002.0)
    assert VClusterApi().missing(first) is None  # the running pod keeps what it booted with

    kube.restart_rollout(test_namespace, "vc-rot", "2026-12-02T19:01:00Z")
    standin.step(now=1003.0)
    second = kube.read_secret_key(test_namespace, "vc-vc-rot", "config")
    assert second is not None and second != first
    remade = kube.get_secret(test_namespace, "vc-rot-certs")
    assert remade is not None and remade.data["ca.crt"] != certs.data["ca.crt"]
    assert VClusterApi().missing(second) is None

    # The old kubeconfig no longer vouches for the server ...
    assert "certificate verify failed" in (VClusterApi().missing(first) or "")
    # ... and the old client certificate, presented to the new server it trusts, is refused by it.
    old_user = yaml.safe_load(first)["users"][0]["user"]
    mixed = yaml.safe_load(second)
    mixed["users"][0]["user"] = old_user
    refused = VClusterApi().missing(yaml.safe_dump(mixed).encode()) or ""
    assert "cannot be reached with the stored kubeconfig: TLS: " in refused, refused

    # The Secret is owned by the vCluster's Service (setOwner, true by default): helm's uninstall,
    # which deletes the Service, takes it along through the garbage collector.
    assert helm.uninstall("vc-rot", test_namespace)
    deadline = time.monotonic() + 60
    while kube.get_secret(test_namespace, "vc-rot-certs") is not None:
        assert time.monotonic() < deadline, "vc-rot-certs outlived its Service by 60 s"
        time.sleep(0.5)
