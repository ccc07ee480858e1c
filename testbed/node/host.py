"""What the node changes on this machine, remembered before and put back after.

:func:`record` reads what the node's parts may change, before any of them starts: the sysctls the
kubelet sets (``protectKernelDefaults: false`` makes it set ``vm.overcommit_memory``,
``kernel.panic`` and ``kernel.panic_on_oops``) and the CNI bridge sets (``net.ipv4.ip_forward``),
which iptables tables exist, and which of :data:`~testbed.node.layout.OUTSIDE_PATHS` exist. It is
written to ``host-state.json`` in :data:`~testbed.node.layout.STATE_DIR` before anything changes,
so that a node that died without its teardown can still be undone (:func:`restore` from the file).

:func:`prepare` makes what the node needs: the node address on ``lo`` and the kubelet's cgroup
root in every cgroup v1 hierarchy (with ``cpuset.cpus``/``cpuset.mems`` copied, or no task could
join it). :func:`restore` undoes everything, each step on its own so one failure does not leave
the rest: unmounts under the node's folders, removes its cgroups depth first, the address, the
bridge, every ``KUBE-*`` and ``CNI-*`` iptables chain and rule (there were none before: the
preflight checks), the sysctls, the paths the node created outside its folder, and the state file.
Tables that did not exist before stay, empty with ACCEPT policies, unless ``nft`` is installed to
delete them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.node.errors import NodeError
from testbed.node.layout import BRIDGE, CGROUP_ROOT, NODE_IP, OUTSIDE_PATHS, POD_CIDR, SERVICE_CIDR, STATE_DIR

log = logging.getLogger(__name__)

SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
)
STATE_FILE = STATE_DIR / "host-state.json"
CGROUP_FS = Path("/sys/fs/cgroup")
_OURS = re.compile(r"(KUBE|CNI)-")


@dataclass(frozen=True)
class HostState:
    """The machine as it was before the node: what :func:`restore` puts back."""

    run_root: str
    sysctls: dict[str, str]
    tables: list[str]  # "ip filter", "ip6 nat", ...
    paths: list[str]  # of OUTSIDE_PATHS, those that existed

    def save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        STATE_FILE.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls) -> HostState | None:
        if not STATE_FILE.is_file():
            return None
        return cls(**json.loads(STATE_FILE.read_text()))


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _read_sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        path = _sysctl_path(name)
        if path.is_file():
            values[name] = path.read_text().strip()
    return values


def _tables() -> list[str]:
    found = []
    for family, save in (("ip", "iptables-save"), ("ip6", "ip6tables-save")):
        out = subprocess.run([save], capture_output=True, text=True, check=False).stdout
        found += [f"{family} {line[1:].strip()}" for line in out.splitlines() if line.startswith("*")]
    return found


def record(run_root: Path) -> HostState:
    """What the node may change, as it is now; saved to :data:`STATE_FILE` before anything changes."""
    state = HostState(
        run_root=str(run_root),
        sysctls=_read_sysctls(),
        tables=_tables(),
        paths=[str(p) for p in OUTSIDE_PATHS if p.exists()],
    )
    state.save()
    return state


def cgroup_hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies (not the unified one a hybrid system also mounts)."""
    return sorted(p for p in CGROUP_FS.iterdir() if p.is_dir() and p.name != "unified" and not p.is_symlink())


def prepare() -> None:
    """The node's address on ``lo``, a route for the Services' ClusterIPs, and the node's cgroup
    root in every hierarchy.

    The route: the kernel picks a route for a connection from this machine before kube-proxy's
    OUTPUT rules rewrite a ClusterIP to a pod's address, so a ClusterIP needs a route even though
    no packet ever leaves by it. A machine with a default route has one; a private network
    namespace (``tools/isolated``) has none, and the API server could not call a webhook's Service.
    """
    _ip("addr", "add", f"{NODE_IP}/32", "dev", "lo")
    _ip("route", "add", SERVICE_CIDR, "dev", "lo", "src", NODE_IP)
    for hierarchy in cgroup_hierarchies():
        ours = hierarchy / CGROUP_ROOT
        ours.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).is_file():
                (ours / name).write_text((hierarchy / name).read_text())


def restore(state: HostState) -> list[str]:
    """Undo what the node did; returns what could not be undone (each step runs regardless)."""
    problems: list[str] = []
    steps: tuple[tuple[str, Callable[[], None]], ...] = (
        ("processes", _kill_leftovers),
        ("unmount", lambda: _unmount_under(Path(state.run_root), STATE_DIR)),
        ("cgroups", _remove_cgroups),
        (
            "route",
            lambda: _ip_if(f"{SERVICE_CIDR} dev lo", ["route", "show"], "route", "del", SERVICE_CIDR, "dev", "lo"),
        ),
        (
            "address",
            lambda: _ip_if(
                f" {NODE_IP}/32 ", ["-4", "addr", "show", "dev", "lo"], "addr", "del", f"{NODE_IP}/32", "dev", "lo"
            ),
        ),
        ("bridge", lambda: _ip_if(BRIDGE, ["link", "show"], "link", "del", BRIDGE)),
        ("iptables", lambda: _drop_our_chains(state)),
        ("ipsets", _destroy_our_sets),
        ("sysctls", lambda: _restore_sysctls(state)),
        ("paths", lambda: _remove_new_paths(state)),
        ("conntrack", _flush_conntrack),
    )
    for name, step in steps:
        try:
            step()
        except (OSError, subprocess.SubprocessError, NodeError) as err:
            problems.append(f"{name}: {err}")
    if not problems:
        STATE_FILE.unlink(missing_ok=True)
        for leftover in STATE_DIR.glob("containerd.sock*"):
            leftover.unlink(missing_ok=True)
    return problems


def _kill_leftovers() -> None:
    """What should have stopped before (the kubelet stops the pods, containerd's shims follow):
    every process in the node's cgroups, and every containerd shim serving the node's socket
    (named by the socket in its command line, which only the node's containerd uses)."""
    pids: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        ours = hierarchy / CGROUP_ROOT
        if ours.is_dir():
            for procs in ours.rglob("cgroup.procs"):
                pids |= {int(p) for p in procs.read_text().split()}
    socket = str(STATE_DIR / "containerd.sock")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if command and command[0].endswith(b"containerd-shim-runc-v2") and socket.encode() in command:
                pids.add(int(entry.name))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if pids:
        time.sleep(1)  # the kernel reaps them; their cgroups can go after


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NodeError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")


def _ip_if(needle: str, show: list[str], *args: str) -> None:
    shown = subprocess.run(["ip", *show], capture_output=True, text=True, check=False).stdout
    if needle in shown:
        _ip(*args)


def _unmount_under(*folders: Path) -> None:
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    prefixes = tuple(str(f).rstrip("/") + "/" for f in folders)
    for point in sorted((m for m in mounts if m.startswith(prefixes)), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _remove_cgroups() -> None:
    for hierarchy in cgroup_hierarchies():
        ours = hierarchy / CGROUP_ROOT
        if ours.is_dir():
            for folder in sorted((p for p in ours.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                folder.rmdir()
            ours.rmdir()


def _drop_our_chains(state: HostState) -> None:
    """Every KUBE-* and CNI-* chain and rule goes (save, filter, restore); other rules stay."""
    for save, restore_cmd in (("iptables-save", "iptables-restore"), ("ip6tables-save", "ip6tables-restore")):
        saved = subprocess.run([save], capture_output=True, text=True, check=True).stdout
        kept = [
            line
            for line in saved.splitlines()
            if not (line.startswith(":") and _OURS.match(line[1:]))
            and not (line.startswith("-A ") and _OURS.search(line))
        ]
        subprocess.run([restore_cmd], input="\n".join(kept) + "\n", text=True, check=True, capture_output=True)
    new_tables = sorted(set(_tables()) - set(state.tables))
    nft = shutil.which("nft")
    for table in new_tables:
        if nft:
            subprocess.run([nft, "delete", "table", *table.split()], capture_output=True, check=False)
    if new_tables and not nft:
        log.info(
            "left empty iptables tables the node made (install nftables to delete them): %s", ", ".join(new_tables)
        )


def _our_sets() -> list[str]:
    """The ipsets of the NetworkPolicy engine (kube-router: ``KUBE-SRC-*``, ``KUBE-DST-*``)."""
    if shutil.which("ipset") is None:
        return []
    names = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=False).stdout
    return [name for name in names.split() if _OURS.match(name)]


def _destroy_our_sets() -> None:
    for name in _our_sets():
        subprocess.run(["ipset", "destroy", name], capture_output=True, text=True, check=True)


def _restore_sysctls(state: HostState) -> None:
    for name, value in state.sysctls.items():
        path = _sysctl_path(name)
        if path.is_file() and path.read_text().strip() != value:
            path.write_text(value)


def _remove_new_paths(state: HostState) -> None:
    for path in OUTSIDE_PATHS:
        if str(path) not in state.paths and path.exists():
            _unmount_under(path)
            shutil.rmtree(path, ignore_errors=True)


def _flush_conntrack() -> None:
    conntrack = shutil.which("conntrack")
    if conntrack:
        for flag in ("-s", "-d"):
            subprocess.run([conntrack, "-D", flag, POD_CIDR], capture_output=True, check=False)


def leftovers() -> list[str]:
    """What of a node is on this machine now (a running one, or one that died unrestored)."""
    found = []
    lo = subprocess.run(["ip", "-4", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=False).stdout
    if f" {NODE_IP}/32 " in lo:
        found.append(f"address {NODE_IP} on lo")
    routes = subprocess.run(["ip", "route", "show"], capture_output=True, text=True, check=False).stdout
    if f"{SERVICE_CIDR} dev lo" in routes:
        found.append(f"route {SERVICE_CIDR} dev lo")
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False).returncode == 0:
        found.append(f"bridge {BRIDGE}")
    found += [f"cgroup {h / CGROUP_ROOT}" for h in cgroup_hierarchies() if (h / CGROUP_ROOT).exists()]
    saved = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    if any(line.startswith(":") and _OURS.match(line[1:]) for line in saved.splitlines()):
        found.append("KUBE-*/CNI-* iptables chains")
    if _our_sets():
        found.append("KUBE-* ipsets")
    return found
