"""Watching Knative scale the functions: pods per Knative Service over time, and cold starts.

:class:`ScaleTimeline` samples, in a thread, how many pods of each function are Ready (one
``kubectl get pods`` for all of them per sample) and keeps the changes: what the issue calls the
scaling timeline of a burst. :func:`cold_start` times one request to a function that is at zero,
through its Route as the broker's deliveries go (Traefik, then Knative's activator, which holds
the request until the autoscaler has started a pod and the pod is ready).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests

from testbed.node import Node
from testbed.processes import ProcessError

SERVICE_LABEL = "serving.knative.dev/service"


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Whether a pod (as the API returns it) is Ready and not being deleted."""
    conditions = pod.get("status", {}).get("conditions", [])
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready and not pod["metadata"].get("deletionTimestamp")


def ready_pods(node: Node, namespace: str, services: Sequence[str]) -> dict[str, int]:
    """Ready pods per Knative Service (0 for one with none)."""
    found: dict[str, Any] = json.loads(node.kubectl("get", "pods", "-n", namespace, "-l", SERVICE_LABEL, "-o", "json"))
    counts = dict.fromkeys(services, 0)
    for pod in found["items"]:
        service = pod["metadata"]["labels"].get(SERVICE_LABEL)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))
        if service in counts and ready and not pod["metadata"].get("deletionTimestamp"):
            counts[service] += 1
    return counts


@dataclass
class ScaleTimeline:
    """Ready pods per function, sampled every ``interval`` seconds while running; only changes kept."""

    sample: Callable[[], Mapping[str, int]]
    interval: float = 0.5
    changes: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _started: float = 0.0

    def start(self) -> ScaleTimeline:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="scale-timeline", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, dict[str, int]]]:
        """Stop sampling, then take one last sample, so the timeline ends at what is true now.

        Without it the last change can be up to a sample (one ``kubectl get`` on a loaded node
        plus ``interval``) old: a test that waited for every function at zero and then read the
        timeline's end saw a pod its own wait had already seen gone (CI of 702b2b1).
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for _ in range(3):  # a failed sample is tried again; the sampler's thread is stopped
            if self._record():
                break
        return self.changes

    def _record(self) -> bool:
        """Take one sample and keep it if it changed anything; False if the sample failed."""
        try:
            counts = dict(self.sample())
        except (ProcessError, ValueError):  # a failed sample is skipped; the next one counts
            return False
        if counts and (not self.changes or self.changes[-1][1] != counts):
            self.changes.append((self.elapsed(), counts))
        return bool(counts)

    def peak(self, service: str, until: float | None = None) -> int:
        """The most Ready pods ``service`` had, over the whole timeline or until ``until``."""
        seen = [counts.get(service, 0) for at, counts in self.changes if until is None or at <= until]
        return max(seen, default=0)

    def elapsed(self) -> float:
        """Seconds since the timeline started (the clock of ``changes``)."""
        return round(time.monotonic() - self._started, 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._record()
            self._stop.wait(self.interval)

    def table(self, services: Sequence[str]) -> str:
        """The timeline as a text table: seconds, then pods per function."""
        short = [s.removeprefix("tenant-") for s in services]
        lines = ["   t(s)  " + "  ".join(f"{s:>12}" for s in short)]
        for at, counts in self.changes:
            lines.append(f"{at:7.1f}  " + "  ".join(f"{counts.get(s, 0):>12}" for s in services))
        return "\n".join(lines)


def cold_start(ingress: str, host: str, path: str = "/healthz", timeout: float = 120.0) -> tuple[int, float]:
    """``GET path`` on a Knative Service through the ingress (``http://<ip>:<port>``) by its
    cluster host name; returns the status and the seconds it took."""
    session = requests.Session()
    session.trust_env = False
    started = time.monotonic()
    response = session.get(f"{ingress}{path}", headers={"Host": host}, timeout=timeout)
    return response.status_code, time.monotonic() - started
