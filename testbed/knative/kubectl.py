"""kubectl against the test bed's API server: the one helper that Knative's installer, the readiness
waits and the local stack all call."""

from __future__ import annotations

from pathlib import Path

from testbed.processes import run
from testbed.toolchain import Toolchain


def kubectl(tools: Toolchain, kubeconfig: Path, *args: str, input: str | None = None) -> str:
    """Run the toolchain's kubectl with ``kubeconfig``; its stdout. Raises ``ProcessError`` with
    kubectl's stderr if it fails."""
    return run([str(tools.kubectl), f"--kubeconfig={kubeconfig}", *args], input=input, timeout=180).stdout
