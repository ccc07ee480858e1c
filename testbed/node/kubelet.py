"""The kubelet: its identity, its configuration, and starting it against the node's containerd.

It authenticates as ``system:node:<name>`` in ``system:nodes`` (a client certificate of the test
bed's CA, so the Node authorizer and NodeRestriction apply to it as in a real cluster) and serves
its API on the node address with a serving certificate of the same CA, which the API server
trusts for logs, exec and port-forward. The configuration is what this machine allows:

- the cgroupfs driver under its own cgroup root (:data:`~testbed.node.layout.CGROUP_ROOT`), cgroup
  v1 explicitly allowed, swap tolerated;
- ``protectKernelDefaults: false`` and ``oomScoreAdj: 0`` (no ``CAP_SYS_RESOURCE`` here); the
  sysctls it then sets are put back by :mod:`testbed.node.host`;
- image garbage collection effectively off: the images are imported, never pulled, so one
  collected could not come back;
- eviction thresholds low enough for a small machine's disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane import ControlPlane, pki
from testbed.controlplane.kubeconfig import b64, write_kubeconfig
from testbed.node.layout import (
    CGROUP_ROOT,
    CLUSTER_DNS,
    CLUSTER_DOMAIN,
    KUBELET_HEALTHZ_PORT,
    KUBELET_PORT,
    NODE_IP,
    NODE_NAME,
    NodeDirs,
)
from testbed.processes import HttpProbe, ManagedProcess, ProcessSpec, Supervisor


def kubelet_config(dirs: NodeDirs, ca_file: Path, cert: Path, key: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{dirs.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "cgroupsPerQOS": True,
        "failSwapOn": False,
        "failCgroupV1": False,
        "protectKernelDefaults": False,
        "oomScoreAdj": 0,
        "address": NODE_IP,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(dirs.kubelet_root / "pod-logs"),
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [CLUSTER_DNS],
        "resolvConf": "/etc/resolv.conf",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
        "maxPods": 60,
    }


def start_kubelet(binary: Path, cp: ControlPlane, dirs: NodeDirs, supervisor: Supervisor) -> ManagedProcess:
    folder = dirs.kubelet
    folder.mkdir(parents=True, exist_ok=True)
    ca = cp.certificate_authority()
    client = ca.issue_client(f"system:node:{NODE_NAME}", ["system:nodes"])
    kubeconfig = write_kubeconfig(
        folder / "kubeconfig",
        server=cp.url,
        ca_pem=cp.ca_file.read_bytes(),
        user=f"system:node:{NODE_NAME}",
        user_entry={"client-certificate-data": b64(client.cert_pem), "client-key-data": b64(client.key_pem)},
    )
    serving = ca.issue_serving([NODE_NAME, "localhost"], [NODE_IP, "127.0.0.1"])
    cert = pki.write_private(folder / "kubelet.crt", serving.cert_pem)
    key = pki.write_private(folder / "kubelet.key", serving.key_pem)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(kubelet_config(dirs, cp.ca_file, cert, key), sort_keys=False))
    return supervisor.start(
        ProcessSpec(
            name="kubelet",
            argv=(
                str(binary),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={dirs.kubelet_root}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ),
        ),
        HttpProbe(f"http://127.0.0.1:{KUBELET_HEALTHZ_PORT}/healthz"),
        ready_timeout=90,
    )
