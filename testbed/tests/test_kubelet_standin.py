"""The kubelet stand-in's container environment and the Deployment status it writes.

A real ``KubeletStandIn`` on a kubeconfig pointing nowhere (its client is created, never used);
the status PATCH goes to a fake AppsV1Api that records the calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.processes import Supervisor
from testbed.standins.kubelet import KubeletStandIn

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: nobody
  user:
    token: unused
contexts:
- name: nowhere
  context:
    cluster: nowhere
    user: nobody
current-context: nowhere
"""


class FakeAppsApi:
    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def patch_namespaced_deployment_status(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.patches.append((name, namespace, body))


@pytest.fixture
def kubelet(tmp_path: Path) -> KubeletStandIn:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    standin = KubeletStandIn(
        kubeconfig, Supervisor(tmp_path / "run"), {}, lambda ns, sa: tmp_path / "token", {"HTTP_PROXY": "x"}
    )
    standin._api = FakeAppsApi()
    return standin


def deployment(
    env: list[client.V1EnvVar] | None = None, *, generation: int = 3, status: client.V1DeploymentStatus | None = None
) -> client.V1Deployment:
    container = client.V1Container(
        name="receive-adapter", image="ko://knative.dev/eventing/cmd/apiserver_receive_adapter", env=env
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(
            name="apiserversource-tenants", namespace="kubeopera-system", generation=generation
        ),
        spec=client.V1DeploymentSpec(
            selector=client.V1LabelSelector(match_labels={"app": "a"}),
            template=client.V1PodTemplateSpec(spec=client.V1PodSpec(containers=[container])),
        ),
        status=status,
    )


def field_ref(path: str) -> client.V1EnvVarSource:
    return client.V1EnvVarSource(field_ref=client.V1ObjectFieldSelector(field_path=path))


def test_plain_values_are_the_environment_with_a_default_path(kubelet: KubeletStandIn) -> None:
    env = [client.V1EnvVar(name="K_SINK", value="http://broker-ingress"), client.V1EnvVar(name="EMPTY")]
    assert kubelet._environment(deployment(env)) == {
        "PATH": "/usr/bin:/bin",
        "K_SINK": "http://broker-ingress",
        "EMPTY": "",
    }


def test_a_container_path_replaces_the_default(kubelet: KubeletStandIn) -> None:
    assert kubelet._environment(deployment([client.V1EnvVar(name="PATH", value="/ko-app")]))["PATH"] == "/ko-app"


def test_no_env_at_all_is_only_the_default_path(kubelet: KubeletStandIn) -> None:
    assert kubelet._environment(deployment()) == {"PATH": "/usr/bin:/bin"}


def test_field_refs_resolve_to_the_pods_namespace_and_name(kubelet: KubeletStandIn) -> None:
    env = [
        client.V1EnvVar(name="NAMESPACE", value_from=field_ref("metadata.namespace")),
        client.V1EnvVar(name="NAME", value_from=field_ref("metadata.name")),
    ]
    resolved = kubelet._environment(deployment(env))
    assert (resolved["NAMESPACE"], resolved["NAME"]) == ("kubeopera-system", "apiserversource-tenants-0")


def test_a_secret_key_ref_is_refused_naming_the_variable(kubelet: KubeletStandIn) -> None:
    secret = client.V1EnvVarSource(secret_key_ref=client.V1SecretKeySelector(name="s", key="k"))
    with pytest.raises(ValueError, match="apiserversource-tenants: env TOKEN uses a source"):
        kubelet._environment(deployment([client.V1EnvVar(name="TOKEN", value_from=secret)]))


def test_a_field_ref_the_standin_does_not_know_is_refused(kubelet: KubeletStandIn) -> None:
    with pytest.raises(ValueError, match="env POD_IP"):
        kubelet._environment(deployment([client.V1EnvVar(name="POD_IP", value_from=field_ref("status.podIP"))]))


def status(generation: int, replicas: int | None, available: int | None) -> client.V1DeploymentStatus:
    return client.V1DeploymentStatus(observed_generation=generation, replicas=replicas, available_replicas=available)


def patches(kubelet: KubeletStandIn) -> list[tuple[str, str, dict[str, Any]]]:
    api: FakeAppsApi = kubelet._api
    return api.patches


def test_a_status_that_already_matches_is_not_patched(kubelet: KubeletStandIn) -> None:
    kubelet._write_status(deployment(status=status(3, 1, 1)), ready=True)
    kubelet._write_status(deployment(status=status(3, 1, None)), ready=False)
    kubelet._write_status(deployment(status=status(3, None, None)), ready=False, replicas=0)
    assert patches(kubelet) == []


def test_a_ready_pod_patches_the_deployment_available(kubelet: KubeletStandIn) -> None:
    kubelet._write_status(deployment(), ready=True)
    [(name, namespace, body)] = patches(kubelet)
    assert (name, namespace) == ("apiserversource-tenants", "kubeopera-system")
    [condition] = body["status"].pop("conditions")
    assert body == {
        "status": {
            "observedGeneration": 3,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
            "unavailableReplicas": 0,
        }
    }
    assert condition["lastUpdateTime"] == condition["lastTransitionTime"]
    assert {k: v for k, v in condition.items() if not k.startswith("last")} == {
        "type": "Available",
        "status": "True",
        "reason": "MinimumReplicasAvailable",
        "message": "host process (kubelet stand-in)",
    }


def test_a_pod_not_ready_patches_it_unavailable(kubelet: KubeletStandIn) -> None:
    kubelet._write_status(deployment(status=status(3, 1, 1)), ready=False)
    [(_, _, body)] = patches(kubelet)
    assert (body["status"]["availableReplicas"], body["status"]["unavailableReplicas"]) == (0, 1)
    assert (body["status"]["conditions"][0]["status"], body["status"]["conditions"][0]["reason"]) == (
        "False",
        "MinimumReplicasUnavailable",
    )


def test_scaled_to_zero_patches_zero_replicas(kubelet: KubeletStandIn) -> None:
    kubelet._write_status(deployment(status=status(3, 1, 0)), ready=False, replicas=0)
    [(_, _, body)] = patches(kubelet)
    assert (body["status"]["replicas"], body["status"]["unavailableReplicas"]) == (0, 0)


def test_a_new_generation_is_patched_even_when_the_counts_match(kubelet: KubeletStandIn) -> None:
    kubelet._write_status(deployment(generation=4, status=status(3, 1, 1)), ready=True)
    [(_, _, body)] = patches(kubelet)
    assert body["status"]["observedGeneration"] == 4
