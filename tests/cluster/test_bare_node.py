"""The node alone: it runs a pod, refuses a second copy, and leaves the machine as it found it.

Runs before the other modules of tests/cluster (the shared cluster fixture starts with the first
test that asks for it), since one node per machine is all there can be.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from testbed.images import PAUSE, build_binary_image
from testbed.node import NodeError, recover_machine, start_node
from testbed.node.host import SYSCTLS, cgroup_hierarchies
from testbed.node.layout import CGROUP_ROOT, OUTSIDE_PATHS
from testbed.node.preflight import missing
from testbed.toolchain import ensure_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

BUILTIN = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "sandbox", "namespace": "default"},
    "spec": {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "pause", "image": PAUSE.ref, "imagePullPolicy": "Never"}],
    },
}


def _machine() -> dict[str, object]:
    """What the node may change on this machine, as it is now."""

    def out(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout

    sysctls = {}
    for name in SYSCTLS:
        path = Path("/proc/sys") / name.replace(".", "/")
        if path.is_file():
            sysctls[name] = path.read_text().strip()
    # Chains and rules; a table the kubelet made stays (empty, its built-in chains ACCEPT) unless
    # nftables is installed to delete it, so built-in chains are not compared.
    saved = out("iptables-save").splitlines()
    chains = sorted(line.split()[0] for line in saved if line.startswith(":") and line.split()[0][1:] not in BUILTIN)
    chains += sorted(line for line in saved if line.startswith("-A "))
    return {
        "sysctls": sysctls,
        "routes": out("ip", "route", "show"),
        "lo": out("ip", "-4", "addr", "show", "dev", "lo"),
        "links": sorted(line.split(":")[1].strip() for line in out("ip", "-o", "link", "show").splitlines()),
        "chains": chains,
        "cgroups": [str(h / CGROUP_ROOT) for h in cgroup_hierarchies() if (h / CGROUP_ROOT).exists()],
        "paths": [str(p) for p in OUTSIDE_PATHS if p.exists()],
    }


@pytest.fixture(scope="module")
def machine_before() -> dict[str, object]:
    lacking = missing()
    if lacking:
        pytest.skip("the node cannot run on this machine: " + "; ".join(lacking))
    # A node killed before its teardown (a CI run stopped mid-way) leaves its cgroups and paths;
    # start_node undoes them, so the machine "before" is the machine after that undo.
    recover_machine()
    return _machine()


def test_a_node_runs_a_pod_refuses_a_second_copy_and_leaves_no_trace(
    machine_before: dict[str, object], tmp_path: Path
) -> None:
    tools = ensure_cluster()
    pause = build_binary_image(PAUSE, tools.pause, tmp_path / "images")
    with start_node(tools, tmp_path / "node", [pause]) as node:
        node.kubectl("apply", "-f", "-", input=json.dumps(POD))
        node.kubectl("wait", "--for=condition=Ready", "pod/sandbox", "--timeout=90s")
        pod = json.loads(node.kubectl("get", "pod", "sandbox", "-o", "json"))
        assert pod["spec"]["nodeName"] == node.name
        assert pod["status"]["podIP"].startswith("10.244.91.")
        with pytest.raises(NodeError, match="another test bed node is running"), start_node(tools, tmp_path / "2", []):
            pass
    assert _machine() == machine_before
