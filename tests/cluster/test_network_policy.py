"""The network boundary between tenants, enforced: the product's NetworkPolicies on a node that
runs a policy engine (kube-router's firewall controller, testbed.node.policy).

Tenants alice and bob are made through the product, so the policies in ``vcluster-alice`` are the
ones install rendered from its own values through helm and the chart, as in production. In
``vcluster-alice`` run a pod labelled as alice's synced workloads are
(``vcluster.loft.sh/managed-by: vc-alice``) and one labelled as her control plane (the chart's
selector, ``app: vcluster, release: vc-alice``, behind the chart's Service ``vc-alice``, whose
EndpointSlice to the vCluster stand-in's API is removed first, so that this pod is its only
endpoint); in
``vcluster-bob`` a pod labelled as bob's workloads. From alice's workload:

- bob's pod and a platform Service (Knative's broker ingress) cannot be connected to;
- alice's control plane (through its Service, by its DNS name) and the cluster DNS can;
- with alice's policies removed, the same connections to bob's pod and the platform Service
  succeed: the refusals were the engine's doing, not the network's; with the policies back they
  are refused again.

Both Tenants are deleted at the end, and waited for until gone.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import pytest
from e2e.support import wait_for

from testbed.cluster.stack import EVENTING_NAMESPACE, NAMESPACE, ClusterStack
from testbed.images.catalog import FUNCTION_IMAGE

from .support import phase, tenant

# Two Tenants made through the product, and (run alone) the cluster's start: more than 600 s.
pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.timeout(1200)]

CS_ALICE = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CS_BOB = "8b2c3d4e-5f6a-4b7c-9d8e-0f1a2b3c4d5e"
ALICE, BOB = "vcluster-alice", "vcluster-bob"
CP_PORT = 8443  # the chart's controlPlane.proxy.port, the target of Service vc-alice's 443
APP_PORT = 8080
# Long enough for a connection that is allowed (all on one node), short enough for one that is not.
CONNECT_SECONDS = 3.0
SETTLE_SECONDS = 60.0  # for the engine to write (or drop) a pod's rules after an API change

SERVE = """
import socket
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", PORT))
server.listen(16)
while True:
    conn, _ = server.accept()
    conn.close()
"""
IDLE = "import time\nwhile True:\n    time.sleep(3600)\n"
# Run in alice's workload: open a TCP connection to HOST:PORT (a name is resolved through the
# cluster DNS) and print whether it opened, as one JSON line. A policy's refusal is a REJECT
# (connection refused) or a drop (timed out); an open connection is all "reached" means.
CONNECT = """
import json, socket, sys
host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    socket.create_connection((host, port), timeout=timeout).close()
    print(json.dumps({"open": True, "error": None}))
except OSError as err:
    print(json.dumps({"open": False, "error": repr(err)}))
"""
RESOLVE = """
import json, socket, sys
try:
    print(json.dumps({"address": socket.gethostbyname(sys.argv[1]), "error": None}))
except OSError as err:
    print(json.dumps({"address": None, "error": repr(err)}))
"""


def _pod(name: str, namespace: str, labels: dict[str, str], code: str, port: int | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": FUNCTION_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", code.replace("PORT", str(port))],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi", "ephemeral-storage": "16Mi"},
            "limits": {"cpu": "200m", "memory": "64Mi", "ephemeral-storage": "64Mi"},
        },
    }
    if port is not None:
        container["ports"] = [{"containerPort": port}]
        container["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 1}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


class Workload:
    """alice's workload pod, from which every connection is tried."""

    def __init__(self, cluster: ClusterStack) -> None:
        self.cluster = cluster

    def _python(self, code: str, *args: str) -> dict[str, Any]:
        out = self.cluster.kubectl("exec", "-n", ALICE, "alice-app", "--", "python3", "-c", code, *args, timeout=60)
        found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return found

    def connect(self, host: str, port: int) -> dict[str, Any]:
        return self._python(CONNECT, host, str(port), str(CONNECT_SECONDS))

    def resolve(self, name: str) -> dict[str, Any]:
        return self._python(RESOLVE, name)


def _settles(app: Workload, what: str, host: str, port: int, *, opens: bool) -> dict[str, Any]:
    """Wait until a connection from alice's workload to ``host:port`` opens (or is refused) as
    ``opens`` says: the engine applies an API change within seconds. Returns the last attempt."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        attempt = app.connect(host, port)
        if attempt["open"] is opens:
            return attempt
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: after {SETTLE_SECONDS:.0f}s the connection still gives {attempt}")
        time.sleep(1)


def _is_ready(cluster: ClusterStack, name: str) -> bool:
    return phase(cluster, name) == "Ready"


def _gone(cluster: ClusterStack, name: str) -> bool:
    return not cluster.kubectl("get", "tenant", name, "-n", NAMESPACE, "--ignore-not-found", "-o", "name").strip()


def _policies(cluster: ClusterStack) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("networkpolicy", "-n", ALICE)["items"]
    return items


def _reapply(cluster: ClusterStack, saved: list[dict[str, Any]]) -> None:
    for policy in saved:
        meta = policy["metadata"]
        policy["metadata"] = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": saved}))


def test_alices_workload_reaches_only_her_control_plane_and_dns(cluster: ClusterStack) -> None:
    started = time.monotonic()
    for name, cs in (("alice", CS_ALICE), ("bob", CS_BOB)):
        cluster.kubectl("apply", "-f", "-", input=tenant(name, cs))
    for name in ("alice", "bob"):
        wait_for(f"{name} to be Ready", functools.partial(_is_ready, cluster, name), timeout=300)
    names = sorted(p["metadata"]["name"] for p in _policies(cluster))
    assert names == ["vc-cp-vc-alice", "vc-work-vc-alice"], "install rendered alice's two egress policies"

    # The vCluster stand-in serves alice's API from the host and points Service vc-alice there
    # with an EndpointSlice of its own (testbed.standins.vcluster); here the pod labelled as her
    # control plane is that Service's only endpoint, as the real vCluster pod would be.
    cluster.kubectl("delete", "endpointslice", "vc-alice-standin", "-n", ALICE)
    pods = [
        _pod("alice-app", ALICE, {"vcluster.loft.sh/managed-by": "vc-alice"}, IDLE, None),
        _pod("alice-cp", ALICE, {"app": "vcluster", "release": "vc-alice"}, SERVE, CP_PORT),
        _pod("bob-app", BOB, {"vcluster.loft.sh/managed-by": "vc-bob"}, SERVE, APP_PORT),
    ]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    try:
        for namespace, name in ((ALICE, "alice-app"), (ALICE, "alice-cp"), (BOB, "bob-app")):
            cluster.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "-n", namespace, "--timeout=120s",
                            timeout=150)  # fmt: skip
        bob = str(cluster.get("pod", "bob-app", "-n", BOB)["status"]["podIP"])
        platform = cluster.cluster_ip("broker-ingress", EVENTING_NAMESPACE)
        control_plane = f"vc-alice.{ALICE}.svc.cluster.local"
        app = Workload(cluster)
        print(f"\nTenants Ready and pods running after {time.monotonic() - started:.0f}s")

        # With the product's policies: bob's pod and the platform Service are refused...
        refused = {
            "bob": _settles(app, "bob's pod from alice's workload", bob, APP_PORT, opens=False),
            "platform": _settles(app, "the broker ingress from alice's workload", platform, 80, opens=False),
        }
        # ...while her control plane (through its Service, by name) and DNS answer.
        dns = app.resolve("kubernetes.default.svc.cluster.local")
        assert dns["address"] == cluster.cluster_ip("kubernetes", "default"), dns
        reached = app.connect(control_plane, 443)
        assert reached["open"], f"alice's workload could not reach her control plane: {reached}"
        print(f"with alice's policies: refused {refused}; control plane {reached}; DNS {dns}")

        # The control: without the policies the same connections succeed (the network allows
        # them; the engine was what refused them), and with the policies back they are refused.
        saved = _policies(cluster)
        cluster.kubectl("delete", "networkpolicy", "--all", "-n", ALICE)
        opened = {
            "bob": _settles(app, "bob's pod without alice's policies", bob, APP_PORT, opens=True),
            "platform": _settles(app, "the broker ingress without alice's policies", platform, 80, opens=True),
        }
        print(f"without alice's policies: {opened}")
        _reapply(cluster, saved)
        again = _settles(app, "bob's pod with alice's policies back", bob, APP_PORT, opens=False)
        print(f"with the policies back: bob {again}")
        print(f"the whole matrix in {time.monotonic() - started:.0f}s")
    finally:
        for namespace, name in ((ALICE, "alice-app"), (ALICE, "alice-cp"), (BOB, "bob-app")):
            cluster.kubectl("delete", "pod", name, "-n", namespace, "--ignore-not-found", "--wait=false")
        # alice's API is unreachable now (its EndpointSlice is gone). Should the cluster's real
        # resync tick have come while her policies were removed, resync set her Pending and
        # check-ready polls her for ever; the Tenants go, so nothing of this test is left to wake
        # a function (tests/cluster/test_scaling.py waits for every one at zero).
        cluster.kubectl("delete", "tenant", "alice", "bob", "-n", NAMESPACE, "--wait=false")
        for name in ("alice", "bob"):
            wait_for(f"{name} gone", functools.partial(_gone, cluster, name), timeout=300)
