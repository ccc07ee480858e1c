"""The vCluster watch's reads on the test bed's real kube-apiserver, as its own ServiceAccount.

``deploy/base/rbac/tenant-vcluster-watch.yaml`` is applied as shipped; the adapter's
``list_seen`` and ``watch_seen`` run with a token of ``tenant-vcluster-watch`` (as its pod's
projected token):

- one LIST over all namespaces finds the StatefulSets with a Tenant's owner labels, wherever they
  are, and not one without them; it gives the version to watch from;
- one WATCH from that version hears a new one (ADDED), its rollout moving (MODIFIED, through the
  status subresource as the StatefulSet controller writes it) and its deletion (DELETED), in
  that order, and ends when the API server ends it;
- the identity can do nothing else: no get by name, no write, no Secret, no other kind.

What the watch makes of those changes (which are worth a look, the hints) is decided in
``shared.model.vcluster_watch`` and tested in tests/unit; the hint reaching check-ready through
Knative's broker in tests/e2e/test_pipeline.py. Not here: an expired watch (410). This API
server's watch cache answers a watch from any version since it started (even "1", after etcd
compacted it), and evicts history only past 100 events older than 75 s; tests/unit reads the
410 the API server then sends, as it writes it, and the loop's re-list.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from shared.adapters.kube import Kube
from shared.errors import Forbidden
from shared.model.naming import LABEL_OWNER_NAME, LABEL_OWNER_NAMESPACE, LABEL_OWNER_UID
from shared.model.ownership import Owner
from shared.model.vcluster_watch import SELECTOR, Change
from testbed.controlplane import ControlPlane, kubeconfig_for_token, kubectl, request_token

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "kubeopera-system"
WATCH = "tenant-vcluster-watch"
MANIFESTS = [REPO / "deploy" / "base" / "namespace.yaml", REPO / "deploy" / "base" / "rbac" / f"{WATCH}.yaml"]


@pytest.fixture(scope="module")
def watch_kube(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """The adapter with a token of the watch's ServiceAccount, its RBAC applied as shipped (and
    deleted after, unless another module had applied it)."""
    there = kubectl(control_plane, "get", "serviceaccount", WATCH, "-n", NAMESPACE, check=False).returncode == 0
    for manifest in MANIFESTS:
        kubectl(control_plane, "apply", "--server-side", "--field-manager=kubeopera-watch-test", "-f", str(manifest))
    token = request_token(control_plane, NAMESPACE, WATCH, duration="1h")
    path = tmp_path_factory.mktemp("watch") / "watch.kubeconfig"
    kube = Kube.connect(
        kubeconfig_for_token(control_plane, token, path, user=f"system:serviceaccount:{NAMESPACE}:{WATCH}"),
        component="vcluster-watch",
    )
    yield kube
    kube.close()
    if not there:
        kubectl(control_plane, "delete", "--ignore-not-found", "--wait=false", "-f", str(MANIFESTS[1]), check=False)


@pytest.fixture
def apps(kube_admin_kubeconfig: Path) -> Iterator[k8s.AppsV1Api]:
    api = k8s_config.new_client_from_config(config_file=str(kube_admin_kubeconfig))
    yield k8s.AppsV1Api(api)
    api.close()


@pytest.fixture
def namespaces(kube_admin_kubeconfig: Path) -> Iterator[list[str]]:
    """Two fresh namespaces, deleted after."""
    api = k8s_config.new_client_from_config(config_file=str(kube_admin_kubeconfig))
    core = k8s.CoreV1Api(api)
    names = [f"vcluster-watch-{secrets.token_hex(3)}" for _ in range(2)]
    for name in names:
        core.create_namespace({"metadata": {"name": name}})
    yield names
    for name in names:
        core.delete_namespace(name)
    api.close()


def statefulset(name: str, owner: Owner | None) -> dict[str, Any]:
    labels = {"app": "vcluster"}
    if owner is not None:
        labels |= {LABEL_OWNER_UID: owner.uid, LABEL_OWNER_NAMESPACE: owner.namespace, LABEL_OWNER_NAME: owner.name}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:0"}]},
            },
        },
    }


def owner(name: str) -> Owner:
    return Owner(NAMESPACE, name, f"uid-{name}-{secrets.token_hex(4)}")


def test_one_list_finds_the_owned_statefulsets_of_every_namespace_and_no_other(
    watch_kube: Kube, apps: k8s.AppsV1Api, namespaces: list[str]
) -> None:
    amy, ben = owner("amy"), owner("ben")
    apps.create_namespaced_stateful_set(namespaces[0], statefulset("vc-amy", amy))
    apps.create_namespaced_stateful_set(namespaces[1], statefulset("vc-ben", ben))
    apps.create_namespaced_stateful_set(namespaces[1], statefulset("by-hand", None))
    listed, version = watch_kube.list_seen(SELECTOR)
    mine = {key: seen for key, seen in listed.items() if key[0] in namespaces}
    assert set(mine) == {(namespaces[0], "vc-amy"), (namespaces[1], "vc-ben")}
    assert mine[(namespaces[0], "vc-amy")].owner == amy
    assert mine[(namespaces[1], "vc-ben")].rollout.replicas == 1
    assert version.isdigit()


def test_one_watch_hears_a_vcluster_come_up_and_go_in_order(
    watch_kube: Kube, apps: k8s.AppsV1Api, namespaces: list[str]
) -> None:
    _, version = watch_kube.list_seen(SELECTOR)
    cara = owner("cara")
    where = namespaces[0]
    apps.create_namespaced_stateful_set(where, statefulset("vc-cara", cara))
    # what the StatefulSet controller and the kubelet report once its pod is ready
    status = {"status": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1}}
    apps.patch_namespaced_stateful_set_status("vc-cara", where, status)
    apps.delete_namespaced_stateful_set("vc-cara", where)
    heard: list[Change] = []
    started = time.monotonic()
    for change in watch_kube.watch_seen(SELECTOR, version, timeout_seconds=5):
        if change.seen is not None and change.seen.key == (where, "vc-cara"):
            heard.append(change)
    assert time.monotonic() - started < 60, "the API server ends the watch at its timeout"
    assert [c.kind for c in heard][:1] == ["ADDED"] and heard[-1].kind == "DELETED", [c.kind for c in heard]
    assert all(c.seen is not None and c.seen.owner == cara for c in heard)
    ready = [c for c in heard if c.kind == "MODIFIED" and c.seen is not None and c.seen.rollout.ready_replicas == 1]
    assert ready, "the pod's readiness, written to the status, is heard"
    versions = [int(c.resource_version) for c in heard]
    assert versions == sorted(versions) and versions[0] > int(version)


def test_the_watch_can_list_and_watch_statefulsets_and_nothing_else(
    watch_kube: Kube, apps: k8s.AppsV1Api, namespaces: list[str]
) -> None:
    dan = owner("dan")
    apps.create_namespaced_stateful_set(namespaces[0], statefulset("vc-dan", dan))
    with pytest.raises(Forbidden):
        watch_kube.get_rollout(namespaces[0], "vc-dan")  # no get by name
    with pytest.raises(Forbidden):
        watch_kube.restart_rollout(namespaces[0], "vc-dan", "2026-12-06T00:00:00Z")  # no write
    with pytest.raises(Forbidden):
        watch_kube.list_secret_records(namespaces[0], "owner=helm")  # no Secret
    with pytest.raises(Forbidden):
        watch_kube.list_owned_namespaces()  # no other kind
