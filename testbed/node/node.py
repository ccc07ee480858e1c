""":func:`start_node`: a real one-node Kubernetes on this machine, torn down to nothing afterwards.

On top of the test bed's control plane (etcd, kube-apiserver, kube-controller-manager, now with
all of its controllers) it runs Debian's containerd and runc with the CNI bridge, the kubelet,
kube-scheduler and kube-proxy, all built from the pinned Kubernetes release
(:func:`testbed.toolchain.ensure_cluster`), then the NetworkPolicy engine (kube-router's firewall
controller, :mod:`testbed.node.policy`) once the Node object is Ready, and yields a :class:`Node`.
What the API server needs for a real node, beyond the fast tier's flags:

- ``--authorization-mode=Node`` (the flag appends: RBAC, then Node) and NodeRestriction;
- a client certificate to reach the kubelet (logs, exec, port-forward), by its InternalIP;
- listening on every address and advertising the node address, with the lease endpoint
  reconciler: Service ``kubernetes`` (10.0.0.1) then leads pods to the API server.

Teardown order matters: the controllers stop first (or ReplicaSets re-create what is deleted),
every pod is deleted and the kubelet given the time to tear down the sandboxes (CNI DEL, volume
unmounts), then the node's processes stop while the API server is still up (it ignores SIGTERM
while a client holds a watch), then the control plane, then containerd (after anything left in it
is killed), and finally the machine is put back as :mod:`testbed.node.host` recorded it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.controlplane import ControlPlane, kubectl, start_control_plane
from testbed.node import host, preflight
from testbed.node.components import start_proxy, start_scheduler
from testbed.node.containerd import Ctr, start_containerd
from testbed.node.errors import NodeError
from testbed.node.kubelet import start_kubelet
from testbed.node.layout import NODE_IP, NODE_NAME, SERVICE_CIDR, NodeDirs
from testbed.node.policy import start_policy_engine
from testbed.processes import Supervisor
from testbed.toolchain import ClusterToolchain

log = logging.getLogger(__name__)

# Every controller but the cloud's and node IPAM (one node, one fixed pod range), and the
# StatefulSet controller: the vCluster pod is the one stand-in of this tier (its image is not
# reachable here), so the vCluster stand-in writes the StatefulSet's status as a kubelet would,
# and nothing makes the pod or its volume claim. No other part of this tier uses a StatefulSet.
CONTROLLERS = ("*", "-nodeipam", "-cloud-node-lifecycle", "-statefulset")


@dataclass(frozen=True)
class Node:
    """A running node: its control plane, its containerd, and where everything is."""

    control_plane: ControlPlane
    ctr: Ctr
    dirs: NodeDirs
    supervisor: Supervisor
    name: str = NODE_NAME
    ip: str = NODE_IP

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.admin_kubeconfig

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120.0) -> str:
        return kubectl(self.control_plane, *args, input=input, timeout=timeout).stdout


def _apiserver_args(dirs: NodeDirs) -> tuple[str, ...]:
    pki = dirs.control_plane / "pki"
    return (
        "--authorization-mode=Node",
        f"--kubelet-client-certificate={pki / 'admin.crt'}",
        f"--kubelet-client-key={pki / 'admin.key'}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--bind-address=0.0.0.0",
        f"--advertise-address={NODE_IP}",
        "--endpoint-reconciler-type=lease",
        # Knative's receivers (authentication-oidc) read the issuer's discovery document at
        # https://kubernetes.default.svc, then its key set at this URI with the same client; by
        # default it is the advertised address, which the serving certificate does not name.
        "--service-account-jwks-uri=https://kubernetes.default.svc/openid/v1/jwks",
    )


def _controller_manager_args(dirs: NodeDirs) -> tuple[str, ...]:
    pki = dirs.control_plane / "pki"
    return (
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    )


@contextlib.contextmanager
def start_node(tools: ClusterToolchain, run_dir: Path, images: Sequence[Path] = ()) -> Iterator[Node]:
    """Start the node under ``run_dir`` with ``images`` (OCI tarballs) imported; undo it all after."""
    dirs = NodeDirs(Path(run_dir).resolve())
    with preflight.exclusive():
        _recover()
        preflight.check()
        state = host.record(dirs.root)
        try:
            host.prepare()
            with Supervisor(dirs.root) as supervisor:  # logs in dirs.logs
                yield from _run(tools, dirs, supervisor, images)
        finally:
            problems = host.restore(state)
            if problems:
                raise NodeError("the node's teardown left the machine changed:\n  " + "\n  ".join(problems))


def recover_machine() -> None:
    """Undo what a node that died without its teardown left, if one did; a no-op otherwise.

    For a caller that records the machine before a node starts and compares after: what a dead
    node left is not the machine as this run found it.
    """
    with preflight.exclusive():
        _recover()


def _recover() -> None:
    """Undo what a node that died without its teardown left (its host-state.json says what)."""
    previous = host.HostState.load()
    if previous is None:
        return
    log.warning("a previous node did not tear down; restoring the machine first", extra={"run": previous.run_root})
    problems = host.restore(previous)
    if problems:
        raise NodeError("could not undo what a previous node left:\n  " + "\n  ".join(problems))


def _run(tools: ClusterToolchain, dirs: NodeDirs, supervisor: Supervisor, images: Sequence[Path]) -> Iterator[Node]:
    containerd, ctr = start_containerd(dirs, supervisor)
    try:
        # The images go into containerd while the control plane starts: the kubelet, started
        # after both, finds them there.
        with (
            _importing(ctr, images) as imported,
            start_control_plane(
                tools.base,
                dirs.control_plane,
                supervisor=supervisor,
                extra_apiserver_args=_apiserver_args(dirs),
                controllers=CONTROLLERS,
                extra_controller_manager_args=_controller_manager_args(dirs),
            ) as cp,
        ):
            imported.result()
            node = Node(control_plane=cp, ctr=ctr, dirs=dirs, supervisor=supervisor)
            with contextlib.ExitStack() as components:
                bins = tools.kube_node
                components.callback(supervisor.stop, start_kubelet(bins / "kubelet", cp, dirs, supervisor))
                components.callback(supervisor.stop, start_scheduler(bins / "kube-scheduler", cp, supervisor))
                components.callback(supervisor.stop, start_proxy(bins / "kube-proxy", cp, supervisor))
                _wait_ready(node)
                engine = start_policy_engine(tools.kube_router, cp, supervisor)
                components.callback(supervisor.stop, engine)
                try:
                    yield node
                finally:
                    _drain(node)
    finally:
        ctr.empty(wait=0)
        supervisor.stop(containerd)


# Imports at once: their time is mostly writing 1.4 GB into containerd's content store. Measured
# idle (tools/isolated, the catalog's 18 images): one at a time 33 s, two 26 s, three 24 s, six 31 s.
IMPORTS = 2


@contextlib.contextmanager
def _importing(ctr: Ctr, images: Sequence[Path]) -> Iterator[concurrent.futures.Future[None]]:
    """The images imported into containerd in the background, :data:`IMPORTS` at a time; the
    future says when they all are."""

    def import_all() -> None:
        with concurrent.futures.ThreadPoolExecutor(max_workers=IMPORTS, thread_name_prefix="image-import") as each:
            for done in [each.submit(ctr, "image", "import", str(image), timeout=300) for image in images]:
                done.result()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="images") as pool:
        yield pool.submit(import_all)


def _wait_ready(node: Node, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    jsonpath = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
    while time.monotonic() < deadline:
        found = kubectl(node.control_plane, "get", "node", NODE_NAME, "-o", jsonpath, check=False)
        if found.stdout.strip() == "True":
            return
        time.sleep(0.5)
    raise NodeError(f"node {NODE_NAME} was not Ready within {timeout:.0f}s (see {node.dirs.logs}/kubelet.log)")


def _drain(node: Node) -> None:
    """Controllers off, every pod deleted, and the kubelet given the time to tear them down."""
    for process in node.supervisor.processes:
        if process.name in ("kube-controller-manager", "kube-scheduler"):
            node.supervisor.stop(process)
    kubectl(
        node.control_plane,
        "delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--timeout=90s",
        check=False,
        timeout=120,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while node.ctr.tasks() and time.monotonic() < deadline:
        time.sleep(0.5)
