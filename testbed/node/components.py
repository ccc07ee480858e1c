"""kube-scheduler and kube-proxy for the node (kube-controller-manager comes with the control plane).

Both talk to the API server with the admin kubeconfig and listen on 127.0.0.1 only. kube-proxy
runs in iptables mode with the flags that keep it off the machine's sysctls (no conntrack
tuning, no ``route_localnet``) and its NodePorts on the node address only; it is what makes a
Service's ClusterIP answer, from the host and from pods, so the API server reaches Knative's
webhooks through their Services as in a real cluster.
"""

from __future__ import annotations

from pathlib import Path

from testbed.controlplane import ControlPlane
from testbed.node.layout import (
    NODE_IP,
    NODE_NAME,
    POD_CIDR,
    PROXY_HEALTHZ_PORT,
    PROXY_METRICS_PORT,
    SCHEDULER_PORT,
)
from testbed.processes import HttpProbe, ManagedProcess, ProcessSpec, Supervisor


def start_scheduler(binary: Path, cp: ControlPlane, supervisor: Supervisor) -> ManagedProcess:
    kubeconfig = str(cp.admin_kubeconfig)
    return supervisor.start(
        ProcessSpec(
            name="kube-scheduler",
            argv=(
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={SCHEDULER_PORT}",
                "--leader-elect=false",
            ),
        ),
        HttpProbe(f"https://127.0.0.1:{SCHEDULER_PORT}/healthz", insecure=True),
        ready_timeout=90,
    )


def start_proxy(binary: Path, cp: ControlPlane, supervisor: Supervisor) -> ManagedProcess:
    return supervisor.start(
        ProcessSpec(
            name="kube-proxy",
            argv=(
                str(binary),
                f"--kubeconfig={cp.admin_kubeconfig}",
                "--proxy-mode=iptables",
                f"--hostname-override={NODE_NAME}",
                f"--cluster-cidr={POD_CIDR}",
                f"--healthz-bind-address=127.0.0.1:{PROXY_HEALTHZ_PORT}",
                f"--metrics-bind-address=127.0.0.1:{PROXY_METRICS_PORT}",
                "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0",
                "--conntrack-tcp-timeout-close-wait=0",
                "--iptables-localhost-nodeports=false",
                f"--nodeport-addresses={NODE_IP}/32",
            ),
        ),
        # 503 until it has synced its rules once; the process is up.
        HttpProbe(f"http://127.0.0.1:{PROXY_HEALTHZ_PORT}/healthz", ok_statuses=frozenset({200, 503})),
        ready_timeout=90,
    )
