"""Where the node lives on this machine: its fixed names and addresses, and its folders.

One node per machine: the kubelet and the CNI plugins use paths outside any folder we give them
(``/var/lib/kubelet/device-plugins``, ``/var/log/containers``, ``/var/lib/cni``), and the bridge,
the subnet, the node address, the cgroup root and the node ports below are fixed. The node's
address is a /32 on ``lo`` (this kernel has no ``dummy`` link type): not in 127/8, so the kubelet
takes it as ``--node-ip`` and the API server may advertise it, and pods reach it through their
gateway without anything touching the machine's own interfaces.

:data:`STATE_DIR` (under ``/run``, which a reboot empties together with the network state it
describes) holds the lock that keeps a second copy out, what the machine looked like before the
node changed it (:mod:`testbed.node.host`), and containerd's sockets (a socket's path must stay
under 108 bytes, which a pytest folder does not).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NODE_NAME = "kubeopera-node"
NODE_IP = "10.99.91.1"
POD_CIDR = "10.244.91.0/24"
SERVICE_CIDR = "10.0.0.0/24"  # the control plane's --service-cluster-ip-range
CLUSTER_DNS = "10.0.0.10"
CLUSTER_DOMAIN = "cluster.local"
BRIDGE = "kobr0"
CGROUP_ROOT = "kubeopera-node"
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
PROXY_HEALTHZ_PORT = 10256
PROXY_METRICS_PORT = 10249
SCHEDULER_PORT = 10259
POLICY_HEALTH_PORT = 20244  # kube-router's health endpoint (its default; it listens on every address)
FIXED_PORTS = (
    KUBELET_PORT,
    KUBELET_HEALTHZ_PORT,
    PROXY_HEALTHZ_PORT,
    PROXY_METRICS_PORT,
    SCHEDULER_PORT,
    POLICY_HEALTH_PORT,
)

STATE_DIR = Path("/run/kubeopera-testbed-node")
# Paths the kubelet, containerd and the CNI plugins create outside the folders they are given;
# removed at teardown when the node made them.
OUTSIDE_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
    Path("/var/lib/cni"),
    Path("/run/netns"),
)


@dataclass(frozen=True)
class NodeDirs:
    """The node's folders under one run folder (and its sockets under :data:`STATE_DIR`)."""

    root: Path

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "conf"

    @property
    def cni_data(self) -> Path:
        return self.root / "cni" / "data"

    @property
    def kubelet(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet-root"

    @property
    def control_plane(self) -> Path:
        return self.root / "control-plane"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def containerd_socket(self) -> Path:
        return STATE_DIR / "containerd.sock"
