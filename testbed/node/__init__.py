"""The cluster tier's real node: containerd, runc and the CNI bridge, the kubelet, kube-scheduler,
kube-proxy and a NetworkPolicy engine beside the test bed's control plane, on this one machine,
and the machine as it was after.

:func:`start_node` is the entry point. The modules, one concern each:

- :mod:`.layout`: the node's fixed names and addresses (one node per machine) and its folders;
- :mod:`.preflight`: the machine-wide lock and what the machine must have;
- :mod:`.host`: what the node changes on the machine, recorded before and restored after;
- :mod:`.containerd`: containerd's and the CNI's configuration, ``ctr``;
- :mod:`.kubelet`: the kubelet's identity and configuration;
- :mod:`.components`: kube-scheduler and kube-proxy;
- :mod:`.policy`: the NetworkPolicy engine (kube-router's firewall controller) and what it needs;
- :mod:`.node`: :func:`start_node`, :class:`Node` and :func:`recover_machine`;
- :mod:`.errors`: :class:`NodeError`.
"""

from __future__ import annotations

from testbed.node.containerd import Ctr
from testbed.node.errors import NodeError
from testbed.node.layout import NODE_IP, NODE_NAME, NodeDirs
from testbed.node.node import Node, recover_machine, start_node

__all__ = ["NODE_IP", "NODE_NAME", "Ctr", "Node", "NodeDirs", "NodeError", "recover_machine", "start_node"]
