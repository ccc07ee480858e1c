"""The functions as real Knative Services on a real node: a Tenant reaches Ready through pods that
Knative Serving starts from the function image, and those pods are locked down as deploy/ says.

Last, the Tenant's vCluster goes down after Ready and comes back (the stand-in's switches), and
its condition VClusterAvailable follows it through those same pods.

Nothing here is a stand-in but the vCluster pod (the vCluster stand-in, a host process) and
kubeopera-api (its stand-in, on the node address): the broker is Knative Eventing's, its
deliveries go through Traefik and Knative's activator to pods the kubelet runs in containerd.
"""

from __future__ import annotations

import base64
import json

import pytest

from shared.model.tenant import COND_AVAILABLE
from testbed.cluster.scaling import ScaleTimeline, ready_pods
from testbed.cluster.stack import NAMESPACE, ClusterStack
from testbed.images import function_image_config
from testbed.standins.vcluster import API_ANNOTATION, CONTROL_PLANE_ANNOTATION

from .support import exec_python, phase, running_pod, tenant, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

CHAIN = ("tenant-router", "tenant-install", "tenant-check-ready", "tenant-store-kubeconfig", "tenant-notify-api")
CS_PIA = "5c6d7e8f-9a0b-4c1d-8e2f-3a4b5c6d7e8f"


def test_a_tenant_reaches_ready_through_knative_service_pods(cluster: ClusterStack) -> None:
    timeline = ScaleTimeline(lambda: ready_pods(cluster.node, NAMESPACE, cluster.functions)).start()
    try:
        cluster.kubectl("apply", "-f", "-", input=tenant("pia", CS_PIA))
        wait_for("pia to be Ready", lambda: phase(cluster, "pia") == "Ready", timeout=300)
        # notify-api comes after Ready: its callback is the end of the chain.
        wait_for("pia's callback", lambda: _callbacks(cluster), timeout=120)

        # Each step's pod: Knative's activator sends it the request as soon as its queue-proxy
        # answers, and the kubelet may mark the pod Ready some seconds after it served (on a loaded
        # machine, after the next step's pod): the pod stays for the autoscaler's windows, so wait.
        def unseen() -> list[str]:
            return [s for s in CHAIN if timeline.peak(s) < 1]

        try:
            wait_for("every step's pod to be seen Ready", lambda: not unseen(), timeout=60)
        except AssertionError:
            raise AssertionError(f"{unseen()} never had a Ready pod: {timeline.changes}") from None
    finally:
        timeline.stop()
    print("\npods per function while pia was provisioned:\n" + timeline.table(cluster.functions))
    secret = cluster.get("secret", f"tenant-{CS_PIA}-kubeconfig", "-n", NAMESPACE)
    assert secret["metadata"]["labels"]["kubeopera.io/tenant-id"] == CS_PIA
    assert _callbacks(cluster), "kubeopera-api got pia's callback from notify-api's pod"


def _callbacks(cluster: ClusterStack) -> list[object]:
    return [r for r in cluster.api.requests() if r.path == f"/api/v1/cloudspaces/{CS_PIA}"]


def test_the_pods_run_the_image_start_command(cluster: ClusterStack) -> None:
    entrypoint = list(function_image_config().entrypoint)
    for service in cluster.services:
        ksvc = cluster.get("ksvc", service, "-n", NAMESPACE)
        container = ksvc["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == entrypoint, service
        revision = cluster.get("revision", ksvc["status"]["latestReadyRevisionName"], "-n", NAMESPACE)
        assert revision["spec"]["containers"][0]["command"] == entrypoint
    pod = cluster.get("pod", running_pod(cluster, "tenant-notify-api"), "-n", NAMESPACE)
    function = next(c for c in pod["spec"]["containers"] if c["name"] == "function")
    assert function["command"] == entrypoint
    assert function["args"] == ["functions.notify_api:create_app()"]


def test_function_pods_are_non_root_with_a_read_only_root(cluster: ClusterStack) -> None:
    pod = running_pod(cluster, "tenant-check-ready")
    identity = json.loads(exec_python(cluster, pod, "import json, os; print(json.dumps([os.getuid(), os.getgid()]))"))
    assert identity == [65532, 65532]
    refused = exec_python(
        cluster,
        pod,
        "import errno\ntry:\n    open('/written-by-a-test', 'w')\n"
        "except OSError as e:\n    print(errno.errorcode[e.errno])",
    )
    assert refused.strip() == "EROFS"
    writable = exec_python(cluster, pod, "open('/tmp/ok', 'w').write('x'); print('ok')")
    assert writable.strip() == "ok", "its emptyDir /tmp is writable"


def test_check_ready_has_its_own_token_and_cannot_write_a_secret(cluster: ClusterStack) -> None:
    pod = running_pod(cluster, "tenant-check-ready")
    token = exec_python(cluster, pod, "print(open('/var/run/secrets/kubernetes.io/serviceaccount/token').read())")
    payload = token.strip().split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["sub"] == f"system:serviceaccount:{NAMESPACE}:tenant-check-ready"
    # The pod's own token, from inside the pod, against the API server through Service kubernetes.
    answer = exec_python(
        cluster,
        pod,
        "import json, ssl, urllib.request as u, urllib.error as e\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
        "ctx = ssl.create_default_context(cafile=sa + '/ca.crt')\n"
        "body = json.dumps({'apiVersion': 'v1', 'kind': 'Secret', 'metadata': {'name': 'forged'}}).encode()\n"
        "req = u.Request('https://kubernetes.default.svc/api/v1/namespaces/vcluster-pia/secrets', data=body, "
        "method='POST', headers={'Authorization': 'Bearer ' + open(sa + '/token').read(), "
        "'Content-Type': 'application/json'})\n"
        "try:\n    print(u.urlopen(req, context=ctx, timeout=10).status)\n"
        "except e.HTTPError as err:\n    print(err.code)",
    )
    assert answer.strip() == "403"
    assert "forged" not in cluster.kubectl("get", "secrets", "-n", "vcluster-pia", "-o", "name")


# A forged dead letter: were it read, dead-letter would mark pia Failed.
FORGED = (
    "import json, urllib.request as u, urllib.error as e\n"
    "headers = {{'ce-specversion': '1.0', 'ce-id': 'forged-1', 'ce-source': '/forger', 'ce-type': "
    "'io.kubeopera.tenant.provisioning', 'knativeerrorcode': '503', 'Content-Type': 'application/json'}}\n"
    "headers.update({auth})\n"
    "body = json.dumps({{'namespace': '{ns}', 'name': 'pia', 'uid': '{uid}', 'generation': 1}}).encode()\n"
    "req = u.Request('{url}', data=body, method='POST', headers=headers)\n"
    "try:\n    print(u.urlopen(req, timeout=60).status)\n"
    "except e.HTTPError as err:\n    print(err.code)"
)


def test_a_pod_cannot_forge_an_event(cluster: ClusterStack) -> None:
    """Any pod can reach the Broker and a cluster-local Knative Service. From inside one (check-ready's),
    a forged event without the broker's token, or with the pod's own ServiceAccount token, is refused
    by the Broker's ingress and by the dead-letter function itself (authentication-oidc and
    SENDER_SUBJECTS), and pia stays Ready."""
    wait_for("pia to be Ready", lambda: phase(cluster, "pia") == "Ready", timeout=300)
    uid = cluster.get("kt", "pia", "-n", NAMESPACE)["metadata"]["uid"]
    pod = running_pod(cluster, "tenant-check-ready")
    own = "{'Authorization': 'Bearer ' + open('/var/run/secrets/kubernetes.io/serviceaccount/token').read()}"
    broker = f"http://broker-ingress.knative-eventing.svc.cluster.local/{NAMESPACE}/default"
    function = f"http://tenant-dead-letter.{NAMESPACE}.svc.cluster.local/"
    answers = {
        (target, who): exec_python(cluster, pod, FORGED.format(auth=auth, ns=NAMESPACE, uid=uid, url=url)).strip()
        for target, url in (("broker", broker), ("dead-letter", function))
        for who, auth in (("no token", "{}"), ("the pod's own token", own))
    }
    assert set(answers.values()) == {"401"}, answers
    assert phase(cluster, "pia") == "Ready"


PROBE = """
import base64, yaml
from shared.adapters.vcluster_api import VClusterApi
config = yaml.safe_load(base64.b64decode("{config}"))
for server in ("https://vc-pia.vcluster-pia.svc:443", "https://vc-pia.vcluster-pia.svc.cluster.local:443"):
    config["clusters"][0]["cluster"]["server"] = server
    print(server, VClusterApi().missing(yaml.safe_dump(config).encode()))
"""


def test_a_pod_reaches_the_vcluster_through_each_advertised_name_with_the_stored_kubeconfig(
    cluster: ClusterStack,
) -> None:
    """From a pod (check-ready's), through real CoreDNS and kube-proxy to the vCluster's Service:
    the stored kubeconfig, with its server at either name the certificate covers, passes the
    checks Ready made (``/readyz``, Services ``kubernetes`` and ``kube-dns``), over TLS with the
    vCluster's own CA."""
    wait_for("pia to be Ready", lambda: phase(cluster, "pia") == "Ready", timeout=300)
    stored = cluster.get("secret", f"tenant-{CS_PIA}-kubeconfig", "-n", NAMESPACE)["data"]["kubeconfig"]
    pod = running_pod(cluster, "tenant-check-ready")
    lines = exec_python(cluster, pod, PROBE.format(config=stored)).strip().splitlines()
    assert lines == [
        "https://vc-pia.vcluster-pia.svc:443 None",
        "https://vc-pia.vcluster-pia.svc.cluster.local:443 None",
    ], lines


def _available(cluster: ClusterStack, name: str) -> tuple[str, str] | None:
    """Condition VClusterAvailable of a Tenant: (status, reason)."""
    conditions = (cluster.get("kt", name, "-n", NAMESPACE).get("status") or {}).get("conditions") or []
    found = next((c for c in conditions if c["type"] == COND_AVAILABLE), None)
    return None if found is None else (str(found["status"]), str(found["reason"]))


def _ticked_until(cluster: ClusterStack, name: str, want: tuple[str, str]) -> None:
    """Resync passes (a tick every 15 s, each in a pod of tenant-resync) until the condition is ``want``.
    The look at the StatefulSet's change may get there first: either is a pass of this test."""

    def reached() -> bool:
        if _available(cluster, name) == want:
            return True
        cluster.tick()
        return False

    wait_for(f"{name}'s VClusterAvailable to be {want}", reached, timeout=180, interval=15)


def test_the_availability_follows_the_vcluster_down_and_up_again(cluster: ClusterStack) -> None:
    """Truth after Ready on real pods: the stand-in's control plane taken down is heard from its
    StatefulSet's change (the vCluster watch's pod, check-ready's pod) with no
    resync tick, and ``kubectl wait`` sees it; its API refusing every connection is found through
    the stored kubeconfig, over real CoreDNS and kube-proxy (resync's pass from its pod, or the
    look); each comes back, with an Event on each change, and the phase stays Ready."""
    wait_for("pia to be Ready", lambda: phase(cluster, "pia") == "Ready", timeout=300)
    assert _available(cluster, "pia") == ("True", "ControlPlaneReady")
    statefulset = ("statefulset", "vc-pia", "-n", "vcluster-pia", "--overwrite")
    wait = ("wait", "tenant/pia", "-n", NAMESPACE, "--timeout=180s")
    try:
        cluster.kubectl("annotate", *statefulset, f"{CONTROL_PLANE_ANNOTATION}=not-ready")
        cluster.kubectl(*wait, "--for=condition=VClusterAvailable=False", timeout=200)
        assert _available(cluster, "pia") == ("False", "ControlPlaneNotReady")
        assert phase(cluster, "pia") == "Ready"
    finally:
        cluster.kubectl("annotate", *statefulset, f"{CONTROL_PLANE_ANNOTATION}-")
    cluster.kubectl(*wait, "--for=condition=VClusterAvailable=True", timeout=200)
    assert _available(cluster, "pia") == ("True", "ControlPlaneReady")

    try:
        cluster.kubectl("annotate", *statefulset, f"{API_ANNOTATION}=down")
        _ticked_until(cluster, "pia", ("False", "APINotServing"))
        assert phase(cluster, "pia") == "Ready"
    finally:
        cluster.kubectl("annotate", *statefulset, f"{API_ANNOTATION}-")
    _ticked_until(cluster, "pia", ("True", "ControlPlaneReady"))

    # An Event on each change (the same reason and message again folds into one's count)
    events = cluster.get("events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=pia")["items"]
    down = [e["message"] for e in events if e["reason"] == "VClusterUnavailable"]
    assert any(m.startswith("no pod of the vCluster's control plane is ready") for m in down), down
    assert any(m.startswith("the vCluster's API") for m in down), down
    assert sum(int(e.get("count") or 1) for e in events if e["reason"] == "VClusterAvailable") >= 2, events
