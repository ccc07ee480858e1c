"""Before the node starts: one copy per machine (:func:`exclusive`), and what it needs (:func:`check`).

:func:`exclusive` holds an exclusive ``flock`` on ``lock`` in :data:`~testbed.node.layout.STATE_DIR`
for as long as the node runs; a second copy is refused at once with the first one's process id
(the lock file holds it). A node that died without its teardown left no lock but its
``host-state.json``: the next start restores what it changed first (:mod:`testbed.node.host`).

:func:`check` refuses, naming each missing thing and the Debian packages that bring it, when the
machine is not one the node can run on: not root; no containerd, runc, ctr, iptables or the CNI
plugins (``containerd runc containernetworking-plugins iptables``); no ``ipset``, or a kernel
without what the NetworkPolicy engine's rules use (:func:`testbed.node.policy.missing`); cgroup v2 only (the node uses
the kubelet's cgroupfs driver under a cgroup v1 root); or the node's fixed ports, address, bridge
or iptables chains are taken by something else.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from testbed.node import policy
from testbed.node.errors import NodeError
from testbed.node.host import CGROUP_FS, cgroup_hierarchies, leftovers
from testbed.node.layout import FIXED_PORTS, STATE_DIR
from testbed.processes import port_is_free

PACKAGES = "containerd runc containernetworking-plugins iptables"
CNI_DIR = Path("/usr/lib/cni")
COMMANDS = (
    "containerd",
    "containerd-shim-runc-v2",
    "runc",
    "ctr",
    "ip",
    "iptables",
    "iptables-save",
    "iptables-restore",
    "ip6tables-save",
    "ip6tables-restore",
)
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Hold the node's machine-wide lock, or refuse when another copy holds it."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    lock = STATE_DIR / "lock"
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise NodeError(
                f"another test bed node is running on this machine (process {holder}); only one can run at a "
                "time (fixed bridge, addresses, ports and kubelet paths). Stop it first."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


def missing() -> list[str]:
    """What this machine lacks for the node, one line each (empty: nothing)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the node needs root (containerd, the kubelet, iptables and cgroups)")
    absent = [c for c in COMMANDS if shutil.which(c) is None]
    absent += [f"{CNI_DIR / p}" for p in CNI_PLUGINS if not (CNI_DIR / p).is_file()]
    if absent:
        problems.append(f"missing {', '.join(absent)}: install the Debian packages `{PACKAGES}`")
    if os.geteuid() == 0:
        problems += policy.missing()
    if (CGROUP_FS / "cgroup.controllers").is_file() or not cgroup_hierarchies():
        problems.append("only cgroup v2 is mounted; the node runs the kubelet under a cgroup v1 root")
    return problems


def check() -> None:
    """Refuse to start, saying why, when the machine lacks something or the node's resources are taken."""
    problems = missing()
    taken = [str(port) for port in FIXED_PORTS if not port_is_free(port, "0.0.0.0")]
    if taken:
        problems.append(f"ports the node needs are in use: {', '.join(taken)}")
    if not problems:
        problems += [f"{thing} exists (not made by a test bed node this machine remembers)" for thing in leftovers()]
    if problems:
        raise NodeError("the test bed's node cannot start here:\n  - " + "\n  - ".join(problems))
