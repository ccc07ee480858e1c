"""The functions' log lines on the cluster tier, kept after their pods are gone.

A function scaled to zero takes its pod, and the kubelet its logs, with it: what a burst's install
pods said is gone by the time a test fails. :class:`PodLogs` follows, in a thread, every pod of the
functions' Knative Services as soon as its ``function`` container has started (one ``kubectl logs
-f`` per pod, ended by the pod's end) into ``<out_dir>/<service>/<pod>.log``, where
:func:`testbed.local.diagnosis.function_log_lines` reads them as it reads a local stack's logs.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.cluster.scaling import SERVICE_LABEL
from testbed.node import Node
from testbed.processes import ProcessError

CONTAINER = "function"
FOLDER = "pod-logs"  # under the cluster's run folder


def _started(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return any(s.get("name") == CONTAINER and ("running" in s.get("state", {}) or "terminated" in s.get("state", {}))
               for s in statuses)  # fmt: skip


@dataclass
class PodLogs:
    """Follows the function pods of ``services`` in ``namespace`` while running."""

    node: Node
    namespace: str
    services: Sequence[str]
    out_dir: Path
    # A pod lives at least the autoscaler's windows (30 s here), and `kubectl logs -f` prints its
    # log from the start whenever it begins: a look every few seconds misses nothing.
    interval: float = 3.0
    _followed: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PodLogs:
        self._thread = threading.Thread(target=self._run, name="pod-logs", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for follower in self._followed.values():
            if follower.poll() is None:
                follower.terminate()
        for follower in self._followed.values():
            try:
                follower.wait(timeout=10)
            except subprocess.TimeoutExpired:
                follower.kill()

    def __enter__(self) -> PodLogs:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listed = json.loads(self.node.kubectl("get", "pods", "-n", self.namespace, "-l", SERVICE_LABEL,
                                                      "-o", "json"))  # fmt: skip
            except (ProcessError, ValueError):  # a failed look is skipped; the next one counts
                listed = {"items": []}
            for pod in listed["items"]:
                name, service = pod["metadata"]["name"], pod["metadata"]["labels"].get(SERVICE_LABEL)
                if service in self.services and name not in self._followed and _started(pod):
                    self._followed[name] = self._follow(service, name)
            self._stop.wait(self.interval)

    def _follow(self, service: str, pod: str) -> subprocess.Popen[bytes]:
        path = self.out_dir / service / f"{pod}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        cp = self.node.control_plane
        with path.open("ab") as out:
            return subprocess.Popen(
                [str(cp.kubectl), f"--kubeconfig={cp.admin_kubeconfig}", "logs", "-f", "-n", self.namespace,
                 pod, "-c", CONTAINER],  # fmt: skip
                stdout=out,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
