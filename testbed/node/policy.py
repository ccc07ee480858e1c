"""The node's NetworkPolicy engine: kube-router's firewall controller, a process on the node.

The bridge CNI connects every pod to every other and enforces nothing, so without an engine a
NetworkPolicy is an object nobody reads. The node runs kube-router (version pinned in
:mod:`testbed.toolchain.versions`) with only its firewall controller (``--run-firewall``; no BGP
routing, no service proxy, no load balancer allocator), as kube-proxy runs: a process with the
admin kubeconfig, in the node's network namespace, with the node's name. It watches pods,
namespaces and NetworkPolicies and writes iptables chains (``KUBE-ROUTER-*``, ``KUBE-POD-FW-*``,
``KUBE-NWPLCY-*``) and ipsets (``KUBE-SRC-*``, ``KUBE-DST-*``) for the pods of this node; traffic a
policy does not allow is rejected. It needs the ``iptables`` and ``ipset`` commands (Debian's
``iptables`` and ``ipset``) and the kernel's ipset types ``hash:ip`` and ``hash:net`` with the
xtables ``set`` match (:func:`missing`).

It starts once the Node object exists (kube-router reads the node's addresses from it); it counts
as started when its health endpoint answers and its first sync has put ``KUBE-ROUTER-FORWARD`` in
the filter table (the health endpoint answers 200 before the informers have synced). The chains start with ``KUBE-``, so
:func:`testbed.node.host.restore` removes them with kube-proxy's; the ipsets go there too.

SIG Network's kube-network-policies was the first choice and cannot run here: it diverts the first
packet of each connection to user space with nftables' native ``queue`` expression, which this
machine's kernel is built without (``CONFIG_NFT_QUEUE``; ``nft add rule ... queue num 100`` answers
"No such file or directory"). :func:`nft_queue_problem` says so on a machine like this one.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from testbed.controlplane import ControlPlane
from testbed.node.errors import NodeError
from testbed.node.layout import NODE_NAME, POLICY_HEALTH_PORT, SERVICE_CIDR
from testbed.processes import HttpProbe, ManagedProcess, ProcessSpec, Supervisor

FORWARD_CHAIN = "KUBE-ROUTER-FORWARD"
# One throwaway network namespace (gone with the command): the set types and the match the
# engine's rules use.
_KERNEL_PROBE = (
    "ipset create kubeopera-probe-ip hash:ip && "
    "ipset create kubeopera-probe-net hash:net && "
    "iptables -w -A OUTPUT -m set --match-set kubeopera-probe-ip dst -m comment --comment probe -j REJECT"
)
_NFT_QUEUE_PROBE = (
    "nft add table inet kubeopera-probe && "
    "nft add chain inet kubeopera-probe c '{ type filter hook postrouting priority 0; }' && "
    "nft add rule inet kubeopera-probe c queue num 100 bypass"
)


def _in_private_netns(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--net", "sh", "-c", script], capture_output=True, text=True, check=False, timeout=30
    )


def missing() -> list[str]:
    """What this machine lacks for the NetworkPolicy engine, one line each (empty: nothing).

    A missing ``iptables`` is the node's own preflight's to report (:mod:`testbed.node.preflight`)."""
    if shutil.which("ipset") is None:
        return ["missing ipset (the NetworkPolicy engine's sets): install the Debian package `ipset`"]
    if shutil.which("iptables") is None or shutil.which("unshare") is None:
        return []
    probe = _in_private_netns(_KERNEL_PROBE)
    if probe.returncode != 0:
        return [
            "the kernel lacks what the NetworkPolicy engine (kube-router) needs: ipset hash:ip and hash:net "
            f"and the iptables `set` match ({probe.stderr.strip() or probe.stdout.strip()})"
        ]
    return []


def nft_queue_problem() -> str | None:
    """Why kube-network-policies cannot run here, or None if the kernel has nftables' ``queue``."""
    if shutil.which("nft") is None or shutil.which("unshare") is None:
        return "cannot tell: no `nft` (Debian's nftables) or `unshare`"
    probe = _in_private_netns(_NFT_QUEUE_PROBE)
    if probe.returncode == 0:
        return None
    return f"nftables' queue expression is refused (kernel without CONFIG_NFT_QUEUE?): {probe.stderr.strip()}"


def start_policy_engine(binary: Path, cp: ControlPlane, supervisor: Supervisor) -> ManagedProcess:
    """kube-router's firewall controller for this node, once its first sync wrote its chains."""
    process = supervisor.start(
        ProcessSpec(
            name="kube-router",
            argv=(
                str(binary),
                f"--kubeconfig={cp.admin_kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--run-loadbalancer=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--health-port={POLICY_HEALTH_PORT}",
                "--metrics-port=0",
            ),
        ),
        HttpProbe(f"http://127.0.0.1:{POLICY_HEALTH_PORT}/healthz"),
        ready_timeout=90,
    )
    deadline = time.monotonic() + 90
    while not _synced():
        if time.monotonic() > deadline:
            log = supervisor.log_dir / "kube-router.log"
            raise NodeError(f"kube-router wrote no {FORWARD_CHAIN} chain within 90 s (see {log})")
        time.sleep(0.5)
    return process


def _synced() -> bool:
    saved = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True, check=False).stdout
    return any(line.startswith(f":{FORWARD_CHAIN} ") for line in saved.splitlines())
