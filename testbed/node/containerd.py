"""Debian's containerd for the node: its config, starting it, asking it things, and emptying it.

containerd runs with its root and state under the node's folder and its sockets in
:data:`~testbed.node.layout.STATE_DIR`; it never touches ``/var/lib/containerd`` or
``/run/containerd``. The CRI settings that this machine needs:

- ``restrict_oom_score_adj = true``: without ``CAP_SYS_RESOURCE`` every sandbox otherwise fails
  with ``runc create failed: ... can't get final child's PID from pipe: EOF``;
- the sandbox image is the locally built pause (:data:`testbed.images.catalog.PAUSE`), never pulled;
- runc with the cgroupfs driver (no systemd here), its state under the node's folder;
- the CNI: the ``bridge`` plugin (:data:`~testbed.node.layout.BRIDGE`, gateway, masquerading,
  hairpin) with ``host-local`` addresses from :data:`~testbed.node.layout.POD_CIDR`, and ``portmap``.

Every ``ctr`` call has a timeout: against a socket nobody serves, ``ctr version`` hangs.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.images.catalog import PAUSE
from testbed.node.errors import NodeError
from testbed.node.layout import BRIDGE, POD_CIDR, NodeDirs
from testbed.processes import ManagedProcess, ProcessSpec, Supervisor

NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace
CTR_TIMEOUT = 10.0


def config_toml(dirs: NodeDirs) -> str:
    root = dirs.containerd
    return f"""\
version = 2
root = "{root / "root"}"
state = "{root / "state"}"
[grpc]
  address = "{dirs.containerd_socket}"
[ttrpc]
  address = "{dirs.containerd_socket}.ttrpc"
[debug]
  address = "{dirs.containerd_socket}.debug"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE.ref}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{root / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{dirs.cni_conf}"
    max_conf_num = 1
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"
"""


def cni_conflist(dirs: NodeDirs) -> str:
    bridge = {
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": True,
        "ipMasq": True,
        "hairpinMode": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": POD_CIDR}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(dirs.cni_data),
        },
    }
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    return json.dumps({"cniVersion": "1.0.0", "name": "kubeopera-node", "plugins": [bridge, portmap]}, indent=1)


@dataclass(frozen=True)
class Ctr:
    """``ctr`` against the node's containerd, in the CRI plugin's namespace."""

    socket: Path

    def __call__(self, *args: str, timeout: float = CTR_TIMEOUT, check: bool = True) -> str:
        argv = ["ctr", "-a", str(self.socket), "-n", NAMESPACE, *args]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise NodeError(f"`{' '.join(argv)}` did not answer within {timeout:.0f}s") from None
        if check and proc.returncode != 0:
            raise NodeError(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}")
        return proc.stdout

    def answers(self) -> bool:
        try:
            self("version", timeout=2)
        except NodeError:
            return False
        return True

    def tasks(self) -> list[str]:
        return self("task", "ls", "-q").split()

    def empty(self, wait: float = 30.0) -> None:
        """Kill what is still running (the kubelet should have stopped it all) and remove it."""
        deadline = time.monotonic() + wait
        while self.tasks() and time.monotonic() < deadline:
            time.sleep(0.5)
        for task in self.tasks():
            self("task", "kill", "-s", "KILL", task, check=False)
        time.sleep(0.5)
        for task in self.tasks():
            self("task", "rm", "-f", task, check=False)
        for container in self("container", "ls", "-q").split():
            self("container", "rm", container, check=False)


@dataclass(frozen=True)
class CtrAnswers:
    """Ready when containerd answers ``ctr version`` on its socket."""

    ctr: Ctr

    def ready(self, process: ManagedProcess) -> bool:
        return self.ctr.socket.exists() and self.ctr.answers()

    def describe(self) -> str:
        return f"`ctr version` answering on {self.ctr.socket}"


def start_containerd(dirs: NodeDirs, supervisor: Supervisor) -> tuple[ManagedProcess, Ctr]:
    dirs.containerd.mkdir(parents=True, exist_ok=True)
    dirs.cni_conf.mkdir(parents=True, exist_ok=True)
    config = dirs.containerd / "config.toml"
    config.write_text(config_toml(dirs))
    (dirs.cni_conf / "10-kubeopera-node.conflist").write_text(cni_conflist(dirs))
    ctr = Ctr(dirs.containerd_socket)
    process = supervisor.start(
        ProcessSpec(name="containerd", argv=("containerd", "--config", str(config))),
        CtrAnswers(ctr),
        ready_timeout=30,
    )
    return process, ctr
