"""Waiting for a Knative object (Broker, Trigger, source) to be Ready; the error shows its conditions."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from testbed.knative.kubectl import kubectl
from testbed.processes import ProcessError
from testbed.toolchain import Toolchain


def wait_ready(
    tools: Toolchain, kubeconfig: Path, namespace: str, kind: str, name: str, timeout: float = 120
) -> dict[str, Any]:
    """Wait for condition Ready of a Knative object; return it. The error shows its conditions."""
    deadline = time.monotonic() + timeout
    while True:
        found = json.loads(
            kubectl(tools, kubeconfig, "get", kind, name, "-n", namespace, "-o", "json", "--ignore-not-found") or "{}"
        )
        conditions = {c["type"]: c for c in found.get("status", {}).get("conditions", [])}
        if conditions.get("Ready", {}).get("status") == "True":
            return dict(found)
        if time.monotonic() > deadline:
            shown = [
                f"{c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}" for c in conditions.values()
            ]
            raise ProcessError(f"{kind} {namespace}/{name} not Ready after {timeout:.0f}s: {shown or 'no status'}")
        time.sleep(0.2)
