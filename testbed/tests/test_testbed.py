"""The test bed works: a real API server with the namespace and garbage-collector controllers,
real helm against a real OCI registry, the real Knative ApiServerSource adapter, the kubeopera-api
stand-in, and nothing left running afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyhelm3
import pytest
import requests
from cloudevents.v1.http import from_http
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from pyhelm3 import errors as helm_errors

from testbed import processes
from testbed.controlplane import (
    ControlPlane,
    create_service_account,
    kubeconfig_for_token,
    kubectl,
    request_token,
)
from testbed.knative.adapter import AdapterConfig, WatchedResource, start_adapter
from testbed.processes import (
    HttpProbe,
    NotReadyError,
    ProcessSpec,
    Supervisor,
    free_port,
    port_is_free,
)
from testbed.registry import CHART_VERSION
from testbed.standins.kubeopera_api import ApiStandIn, RecordedRequest
from testbed.toolchain import Toolchain

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
# Bound for the controllers' work: garbage collection takes well under a second; a namespace
# about 5.5 s, as the namespace controller waits a fixed 5 s before acting on a deletion.
CONTROLLER_WAIT_SECONDS = 60.0


@pytest.fixture(scope="session")
def api_client(kube_admin_kubeconfig: Path) -> Iterator[k8s.ApiClient]:
    api = k8s_config.new_client_from_config(config_file=str(kube_admin_kubeconfig))
    yield api
    api.close()


# --- the API server ---------------------------------------------------------------------------


def test_namespace_and_secret_are_created_on_the_real_api_server(
    api_client: k8s.ApiClient, test_namespace: str
) -> None:
    core = k8s.CoreV1Api(api_client)
    name = f"{test_namespace}-extra"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    assert core.read_namespace(name).status.phase == "Active"

    core.create_namespaced_secret(
        test_namespace,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="hello"), string_data={"key": "value"}),
    )
    secret = core.read_namespaced_secret("hello", test_namespace)
    assert secret.data == {"key": "dmFsdWU="}
    assert secret.metadata.uid and secret.metadata.resource_version
    core.delete_namespace(name)


def test_requests_without_credentials_are_refused(control_plane: ControlPlane) -> None:
    response = requests.get(f"{control_plane.url}/api/v1/namespaces", verify=str(control_plane.ca_file), timeout=10)
    assert response.status_code in (401, 403), response.text

    anonymous = k8s.Configuration()
    anonymous.host = control_plane.url
    anonymous.ssl_ca_cert = str(control_plane.ca_file)
    with k8s.ApiClient(anonymous) as api, pytest.raises(ApiException) as raised:
        k8s.CoreV1Api(api).list_namespaced_secret("default")
    assert raised.value.status in (401, 403)


def test_service_account_token_works_and_rbac_applies(
    control_plane: ControlPlane, test_namespace: str, tmp_path: Path
) -> None:
    create_service_account(control_plane, test_namespace, "robot")
    token = request_token(control_plane, test_namespace, "robot", duration="10m")
    kubeconfig = kubeconfig_for_token(control_plane, token, tmp_path / "robot.kubeconfig", user="robot")

    whoami = kubectl(control_plane, "auth", "whoami", "-o", "json", kubeconfig=kubeconfig)
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{test_namespace}:robot"
    )
    denied = kubectl(control_plane, "get", "secrets", "-n", test_namespace, kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()

    kubectl(
        control_plane,
        "create",
        "role",
        "read-secrets",
        "-n",
        test_namespace,
        "--verb=get,list",
        "--resource=secrets",
    )
    kubectl(
        control_plane,
        "create",
        "rolebinding",
        "robot-reads",
        "-n",
        test_namespace,
        "--role=read-secrets",
        f"--serviceaccount={test_namespace}:robot",
    )
    allowed = kubectl(control_plane, "get", "secrets", "-n", test_namespace, kubeconfig=kubeconfig, check=False)
    assert allowed.returncode == 0, allowed.stderr


def _gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def _wait_until_gone(what: str, read: Callable[[], object], timeout: float = CONTROLLER_WAIT_SECONDS) -> float:
    """Poll ``read`` until it answers 404; return the seconds it took."""
    started = time.monotonic()
    while not _gone(read):
        if time.monotonic() - started > timeout:
            pytest.fail(f"{what} still exists after {timeout:.0f}s")
        time.sleep(0.2)
    return time.monotonic() - started


def test_a_deleted_namespace_and_its_content_really_go_away(api_client: k8s.ApiClient, test_namespace: str) -> None:
    core = k8s.CoreV1Api(api_client)
    name = f"{test_namespace}-doomed"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    core.create_namespaced_config_map(
        name, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="settings"), data={"a": "b"})
    )
    core.create_namespaced_secret(
        name, k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="token"), string_data={"key": "value"})
    )

    core.delete_namespace(name)
    assert core.read_namespace(name).status.phase == "Terminating"  # the controller waits 5 s first
    seconds = _wait_until_gone(f"namespace {name}", lambda: core.read_namespace(name))
    print(f"namespace deleted in {seconds:.1f}s")
    assert _gone(lambda: core.read_namespaced_config_map("settings", name))
    assert _gone(lambda: core.read_namespaced_secret("token", name))
    assert not core.list_namespaced_config_map(name).items


def test_an_object_whose_owner_is_deleted_is_garbage_collected(api_client: k8s.ApiClient, test_namespace: str) -> None:
    core = k8s.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(test_namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="owner")))
    reference = k8s.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    core.create_namespaced_config_map(
        test_namespace,
        k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="owned", owner_references=[reference])),
    )
    core.create_namespaced_secret(
        test_namespace,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="owned-secret", owner_references=[reference])),
    )
    core.create_namespaced_config_map(test_namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="bystander")))

    core.delete_namespaced_config_map("owner", test_namespace)
    seconds = _wait_until_gone("ConfigMap owned", lambda: core.read_namespaced_config_map("owned", test_namespace))
    _wait_until_gone("Secret owned-secret", lambda: core.read_namespaced_secret("owned-secret", test_namespace))
    print(f"dependents collected in {seconds:.1f}s")
    assert core.read_namespaced_config_map("bystander", test_namespace).metadata.name == "bystander"


# --- helm, the registry and the stand-in chart ------------------------------------------------


VCLUSTER_VALUES: dict[str, Any] = {
    "controlPlane": {
        "distro": {"k3s": {"enabled": True}},
        "proxy": {"extraSANs": ["vc-demo.ns.svc"]},
        "statefulSet": {
            "resources": {
                "limits": {"cpu": "2", "memory": "4Gi"},
                "requests": {"cpu": "200m", "memory": "256Mi"},
            },
            "labels": {"kubeopera.io/tenant-id": "7e9d3a1b", "environment": "development"},
            "annotations": {"kubeopera.io/tenant": "alice-default"},
        },
    },
    "sync": {"toHost": {"ingresses": {"enabled": True}, "serviceAccounts": {"enabled": True}}},
    "exportKubeConfig": {
        "context": "vcluster",
        "server": "https://vc-demo.ns:443",
        "insecure": False,
        "serviceAccount": {"name": "admin", "namespace": "kube-system", "clusterRole": "cluster-admin"},
        "secret": {"name": "vc-vc-demo", "namespace": "ns"},
    },
}


def _helm(toolchain: Toolchain, kubeconfig: Path) -> pyhelm3.Client:
    return pyhelm3.Client(executable=str(toolchain.helm), kubeconfig=kubeconfig)


def test_pyhelm3_installs_the_stand_in_chart_from_the_local_registry(
    toolchain: Toolchain,
    kube_admin_kubeconfig: Path,
    chart_ref: str,
    helm_env: dict[str, str],
    api_client: k8s.ApiClient,
    test_namespace: str,
) -> None:
    helm = _helm(toolchain, kube_admin_kubeconfig)

    async def install() -> tuple[Any, Any]:
        chart = await helm.get_chart(chart_ref, version=CHART_VERSION)
        assert chart.metadata.name == "vcluster" and str(chart.metadata.version) == CHART_VERSION
        revision = await helm.install_or_upgrade_release(
            "vc-demo", chart, VCLUSTER_VALUES, namespace=test_namespace, wait=False, create_namespace=False
        )
        current = await helm.get_current_revision("vc-demo", namespace=test_namespace)
        return revision, current

    revision, current = asyncio.run(install())
    assert revision.revision == 1
    assert current.status == pyhelm3.ReleaseRevisionStatus.DEPLOYED

    core = k8s.CoreV1Api(api_client)
    release_secret = core.read_namespaced_secret("sh.helm.release.v1.vc-demo.v1", test_namespace)
    assert release_secret.type == "helm.sh/release.v1"
    sts = k8s.AppsV1Api(api_client).read_namespaced_stateful_set("vc-demo", test_namespace)
    container = sts.spec.template.spec.containers[0]
    assert container.image == "ghcr.io/loft-sh/vcluster-pro:0.21.2"
    # helm merges our values into the chart's defaults (which also limit ephemeral-storage)
    assert {"cpu": "2", "memory": "4Gi"}.items() <= container.resources.limits.items()
    assert container.resources.requests["cpu"] == "200m"
    assert sts.metadata.labels["kubeopera.io/tenant-id"] == "7e9d3a1b"
    assert sts.metadata.annotations["kubeopera.io/tenant"] == "alice-default"
    assert core.read_namespaced_service("vc-demo", test_namespace).spec.ports[0].port == 443
    assert core.read_namespaced_service_account("vc-vc-demo", test_namespace)
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    assert rbac.read_namespaced_role("vc-vc-demo", test_namespace)
    assert rbac.read_namespaced_role_binding("vc-vc-demo", test_namespace)


@pytest.mark.parametrize(
    "bad_values, offending",
    [
        ({"notAVclusterKey": True}, "notAVclusterKey"),
        ({"controlPlane": {"statefulSet": {"resourcez": {}}}}, "resourcez"),
        ({"exportKubeConfig": {"secret": {"nam": "x"}}}, "nam"),
    ],
)
def test_unknown_values_fail_with_helms_schema_error(
    toolchain: Toolchain,
    kube_admin_kubeconfig: Path,
    chart_ref: str,
    helm_env: dict[str, str],
    test_namespace: str,
    bad_values: dict[str, Any],
    offending: str,
) -> None:
    helm = _helm(toolchain, kube_admin_kubeconfig)

    async def install() -> None:
        chart = await helm.get_chart(chart_ref, version=CHART_VERSION)
        await helm.install_or_upgrade_release(
            "vc-bad", chart, bad_values, namespace=test_namespace, wait=False, create_namespace=False
        )

    with pytest.raises(helm_errors.Error) as raised:
        asyncio.run(install())
    stderr = raised.value.stderr.decode()
    assert "values don't meet the specifications of the schema" in stderr
    assert offending in stderr


def test_helm_talks_plain_http_to_the_loopback_registry_without_flags(
    toolchain: Toolchain, chart_ref: str, helm_env: dict[str, str], tmp_path: Path
) -> None:
    # chart_ref was pushed without --plain-http; pulling works without it too.
    result = processes.run(
        [str(toolchain.helm), "pull", chart_ref, "--version", CHART_VERSION, "--destination", str(tmp_path)],
        env=helm_env,
    )
    assert (tmp_path / f"vcluster-{CHART_VERSION}.tgz").is_file(), result.stderr


# --- the Knative ApiServerSource adapter ------------------------------------------------------


def test_apiserversource_adapter_posts_add_events_to_a_sink(
    toolchain: Toolchain,
    control_plane: ControlPlane,
    testbed_supervisor: Supervisor,
    api_client: k8s.ApiClient,
    test_namespace: str,
    api_standin: ApiStandIn,
    tmp_path: Path,
) -> None:
    config = AdapterConfig(
        sink=api_standin.url,
        resources=(WatchedResource(version="v1", resource="configmaps"),),
        namespaces=(test_namespace,),
        name="testbed-configmaps",
        namespace=test_namespace,
    )
    started = time.monotonic()
    with start_adapter(
        toolchain, control_plane.admin_kubeconfig, config, tmp_path, supervisor=testbed_supervisor
    ) as adapter:
        print(f"adapter ready in {time.monotonic() - started:.1f}s")
        k8s.CoreV1Api(api_client).create_namespaced_config_map(
            test_namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="watched"), data={"a": "b"})
        )
        recorded = api_standin.wait_for_requests(1, timeout=30)
        assert adapter.process.running()

    request = recorded[0]
    assert request.method == "POST"
    event = from_http(dict(request.headers), request.body)
    assert event["type"] == "dev.knative.apiserver.resource.add"
    assert event["source"] == control_plane.url
    assert event["subject"] == f"/apis/v1/namespaces/{test_namespace}/configmaps/watched"
    assert event["kind"] == "ConfigMap"
    assert event["name"] == "watched"
    assert event["namespace"] == test_namespace
    assert event["apiversion"] == "v1"
    assert event.data["metadata"]["name"] == "watched"
    assert event.data["data"] == {"a": "b"}


# --- nothing left behind ----------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return state[state.rfind(")") + 2] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_the_control_plane_and_frees_its_ports(
    tmp_path: Path, toolchain: Toolchain, sig: signal.Signals
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.controlplane", "--workdir", str(tmp_path / "cp")],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    pids: list[int] = []
    try:
        line = ""
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while not line.startswith("{") and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert line.startswith("{"), f"control plane CLI did not start: {proc.stderr.read() if proc.stderr else ''}"
        info = json.loads(line)
        print(f"control plane started in {info['seconds']}s")
        assert set(info["pids"]) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        pids = list(info["pids"].values())
        assert all(_pid_alive(pid) for pid in pids)
        port = int(info["url"].rsplit(":", 1)[1])
        assert not port_is_free(port)

        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 128 + sig
    finally:
        if proc.poll() is None:  # the test failed or was interrupted: stop the CLI the clean way
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            for pid in pids:  # its children are in their own process groups: do not leak them
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(_pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if _pid_alive(pid)]
    assert port_is_free(port)


def test_a_process_that_never_gets_ready_is_stopped_and_its_log_shown(tmp_path: Path) -> None:
    with Supervisor(tmp_path) as supervisor:
        with pytest.raises(NotReadyError) as raised:
            supervisor.start(
                ProcessSpec(name="sleeper", argv=("sh", "-c", "echo waiting-for-nothing; exec sleep 300")),
                HttpProbe(f"http://127.0.0.1:{free_port()}/"),
                ready_timeout=1.5,
            )
        assert "waiting-for-nothing" in str(raised.value)
        assert supervisor.processes == []
        with pytest.raises(NotReadyError, match="exited with code 3"):
            supervisor.start(
                ProcessSpec(name="crasher", argv=("sh", "-c", "echo boom; exit 3")),
                HttpProbe("http://127.0.0.1:1/"),
            )
    started = [p for p in processes.all_processes() if p.log_path.parent == tmp_path / "logs"]
    assert started and not any(p.group_alive() for p in started)


def test_an_exception_or_ctrl_c_inside_the_block_stops_everything(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), Supervisor(tmp_path) as supervisor:
        first = supervisor.start(ProcessSpec(name="one", argv=("sleep", "300")))
        # a child that forks a grandchild into its process group: both must go
        second = supervisor.start(ProcessSpec(name="two", argv=("sh", "-c", "sleep 300 & exec sleep 301")))
        assert first.group_alive() and second.group_alive()
        raise KeyboardInterrupt
    assert not first.group_alive() and not second.group_alive()


# --- the kubeopera-api stand-in ---------------------------------------------------------------


def test_api_standin_records_requests_and_obeys_its_modes(api_standin: ApiStandIn) -> None:
    url = api_standin.url
    ok = requests.patch(
        f"{url}/api/v1/cloudspaces/7e9d3a1b",
        json={"status": "active"},
        headers={"Authorization": "Bearer internal"},
        timeout=5,
    )
    assert ok.status_code == 200
    [recorded] = api_standin.requests()
    assert (recorded.method, recorded.path, recorded.json) == (
        "PATCH",
        "/api/v1/cloudspaces/7e9d3a1b",
        {"status": "active"},
    )
    assert recorded.header("authorization") == "Bearer internal"

    api_standin.set_mode("error")
    assert requests.get(f"{url}/x", timeout=5).status_code == 500

    api_standin.set_mode("down")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/x", timeout=5)

    api_standin.set_mode("hang")
    with pytest.raises(requests.Timeout):
        requests.get(f"{url}/slow", timeout=0.5)
    api_standin.set_mode("ok")
    assert requests.get(f"{url}/x", timeout=5).status_code == 200

    listed = requests.get(f"{url}/_/requests", timeout=5).json()
    assert [r["path"] for r in listed] == [r.path for r in api_standin.requests()]
    api_standin.clear()
    assert api_standin.requests() == []


def test_api_standin_runs_as_its_own_process(tmp_path: Path) -> None:
    port = free_port()
    with Supervisor(tmp_path) as supervisor:
        supervisor.start(
            ProcessSpec(
                name="api-standin",
                argv=(sys.executable, "-m", "testbed.standins.kubeopera_api", "--port", str(port)),
                cwd=REPO_ROOT,
            ),
            HttpProbe(f"http://127.0.0.1:{port}/_/mode"),
            ready_timeout=30,
        )
        requests.post(f"http://127.0.0.1:{port}/api/v1/cloudspaces/abc", json={"a": 1}, timeout=5)
        assert requests.put(f"http://127.0.0.1:{port}/_/mode", json={"mode": "error"}, timeout=5).ok
        assert requests.post(f"http://127.0.0.1:{port}/x", timeout=5).status_code == 500
        listed = [
            RecordedRequest.from_dict(r) for r in requests.get(f"http://127.0.0.1:{port}/_/requests", timeout=5).json()
        ]
        assert [(r.method, r.path, r.json) for r in listed] == [
            ("POST", "/api/v1/cloudspaces/abc", {"a": 1}),
            ("POST", "/x", None),
        ]
    assert port_is_free(port)
