"""STAND-IN for the kubelet, for the few Deployments whose images are host binaries here.

The fast tier of the test bed has no node: no kubelet, no container runtime, no pods. Knative's
eventing controller still creates Deployments for the sources (the ApiServerSource's adapter in
the source's namespace, ``pingsource-mt-adapter`` in knative-eventing), configured entirely by
what it writes into them: container environment (``K_SINK``, ``K_SOURCE_CONFIG``, logging,
``NAME``/``NAMESPACE``...), the ServiceAccount, replicas. This module plays kubelet for exactly
those: it watches Deployments, and for each one with replicas > 0 whose image it knows
(``ko://knative.dev/eventing/cmd/<package>``, which ``ko`` would have resolved to an image built
from the same package; here the toolchain's binary of that package) it runs the binary with:

- the container's ``env`` (``value`` and ``fieldRef`` to the pod's namespace/name, as the kubelet
  resolves them) and ``args``;
- a kubeconfig holding a token of the pod's ServiceAccount (TokenRequest, the projected token a
  pod gets), so RBAC applies as in a cluster;
- ``HTTP_PROXY`` to the service proxy (cluster DNS, see :mod:`testbed.standins.service_proxy`).

It restarts the process when the pod template changes, stops it when the Deployment goes or is
scaled to zero, and writes the Deployment's status (Available once the readiness check passes),
which the eventing controller reads to mark the source Ready. Deployments of host processes the
test bed starts itself (the in-memory channel dispatcher) are only marked Available while they run.
``hold`` stops one pod and keeps it down (a node that lost it), ``release`` lets it run again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from testbed.processes import ManagedProcess, Probe, ProcessSpec, Supervisor

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5

Identity = Callable[[str, str], Path]  # (namespace, service account) -> kubeconfig with its token
ProbeFor = Callable[[Mapping[str, str]], Probe | None]  # the pod's environment -> readiness probe


@dataclass(frozen=True)
class Image:
    """What runs for an image: a host binary (and its readiness check), or a process started elsewhere."""

    binary: Path | None = None
    args: tuple[str, ...] = ()  # flags a test bed adds (e.g. log verbosity for its readiness check)
    probe: ProbeFor = field(default=lambda env: None)
    running: Callable[[], bool] | None = None  # for a process the test bed runs itself


@dataclass
class _Pod:
    key: str  # namespace/name of the Deployment
    template_hash: str
    process: ManagedProcess
    ready: bool = False


class KubeletStandIn:
    """Runs the known images of Deployments as host processes; see the module docstring."""

    def __init__(
        self,
        kubeconfig: Path,
        supervisor: Supervisor,
        images: Mapping[str, Image],
        identity: Identity,
        pod_environment: Mapping[str, str],
    ) -> None:
        self._api: Any = client.AppsV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self._supervisor = supervisor
        self._images = dict(images)
        self._identity = identity
        self._pod_environment = dict(pod_environment)
        self._pods: dict[str, _Pod] = {}
        self._held: set[str] = set()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet-standin", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._lock:
            for pod in self._pods.values():
                self._supervisor.stop(pod.process)
            self._pods.clear()

    # ------------------------------------------------------------------ for tests
    def pod(self, namespace: str, deployment: str) -> ManagedProcess | None:
        with self._lock:
            found = self._pods.get(f"{namespace}/{deployment}")
            return found.process if found else None

    def wait_pod(self, namespace: str, prefix: str, timeout: float = 60) -> tuple[str, ManagedProcess]:
        """The ready pod of the Deployment in ``namespace`` whose name starts with ``prefix``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for key, pod in self._pods.items():
                    ns, name = key.split("/", 1)
                    if ns == namespace and name.startswith(prefix) and pod.ready:
                        return name, pod.process
            time.sleep(0.1)
        raise TimeoutError(f"no ready pod of a Deployment {namespace}/{prefix}* within {timeout:.0f}s")

    def held(self) -> list[str]:
        """namespace/name of the Deployments kept down by :meth:`hold`."""
        with self._lock:
            return sorted(self._held)

    def hold(self, namespace: str, deployment: str) -> None:
        """Stop the Deployment's process and keep it stopped until :meth:`release`."""
        key = f"{namespace}/{deployment}"
        with self._lock:
            self._held.add(key)
            pod = self._pods.pop(key, None)
        if pod is not None:
            self._supervisor.stop(pod.process)

    def release(self, namespace: str, deployment: str, timeout: float = 60) -> ManagedProcess:
        """Let it run again; returns the new process once it is ready."""
        with self._lock:
            self._held.discard(f"{namespace}/{deployment}")
        return self.wait_pod(namespace, deployment, timeout)[1]

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception as err:  # the API server restarting or gone at teardown, a bad Deployment
                log.warning("kubelet stand-in: sync failed: %s", str(err).splitlines()[0] if str(err) else repr(err))
            self._stop.wait(POLL_SECONDS)

    def _sync(self) -> None:
        seen: set[str] = set()
        deployment: Any
        for deployment in self._api.list_deployment_for_all_namespaces().items:
            key = f"{deployment.metadata.namespace}/{deployment.metadata.name}"
            containers = deployment.spec.template.spec.containers
            image = self._images.get(containers[0].image) if containers else None
            if image is None:
                continue
            seen.add(key)
            replicas = 1 if deployment.spec.replicas is None else deployment.spec.replicas
            if image.running is not None:
                self._write_status(deployment, ready=replicas > 0 and image.running())
                continue
            self._run(key, deployment, image, wanted=replicas > 0)
        with self._lock:
            gone = [key for key in self._pods if key not in seen]
        for key in gone:
            self._remove(key)

    def _run(self, key: str, deployment: Any, image: Image, *, wanted: bool) -> None:
        template = self._api.api_client.sanitize_for_serialization(deployment.spec.template)
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]
        with self._lock:
            pod = self._pods.get(key)
            held = key in self._held
        if pod is not None and (not wanted or held or pod.template_hash != digest or not pod.process.running()):
            self._remove(key)
            pod = None
        if not wanted or held:
            self._write_status(deployment, ready=False, replicas=0 if not wanted else 1)
            return
        if pod is None:
            pod = self._start_pod(key, deployment, image, digest)
            if pod is None:
                return
        if not pod.ready:
            probe = image.probe(self._environment(deployment))
            pod.ready = probe is None or probe.ready(pod.process)
        self._write_status(deployment, ready=pod.ready)

    def _start_pod(self, key: str, deployment: Any, image: Image, digest: str) -> _Pod | None:
        assert image.binary is not None
        container = deployment.spec.template.spec.containers[0]
        namespace = deployment.metadata.namespace
        account = deployment.spec.template.spec.service_account_name or "default"
        env = self._environment(deployment)
        env.update(self._pod_environment)
        env["KUBECONFIG"] = str(self._identity(namespace, account))
        name = f"pod-{deployment.metadata.name}"
        argv = (str(image.binary), f"--kubeconfig={env['KUBECONFIG']}", *image.args, *(container.args or ()))
        process = self._supervisor.start(ProcessSpec(name=name, argv=argv, env=env, inherit_env=False))
        pod = _Pod(key, digest, process)
        with self._lock:
            self._pods[key] = pod
        log.info("kubelet stand-in: started %s for Deployment %s (ServiceAccount %s)", name, key, account)
        return pod

    def _environment(self, deployment: Any) -> dict[str, str]:
        """The container's environment as a kubelet resolves it (plain values and fieldRefs)."""
        pod_name = f"{deployment.metadata.name}-0"
        fields = {"metadata.namespace": deployment.metadata.namespace, "metadata.name": pod_name}
        env: dict[str, str] = {"PATH": "/usr/bin:/bin"}
        for var in deployment.spec.template.spec.containers[0].env or ():
            if var.value_from is None:
                env[var.name] = var.value or ""
            elif var.value_from.field_ref is not None and var.value_from.field_ref.field_path in fields:
                env[var.name] = fields[var.value_from.field_ref.field_path]
            else:
                raise ValueError(
                    f"Deployment {deployment.metadata.name}: env {var.name} uses a source the "
                    "kubelet stand-in does not resolve"
                )
        return env

    def _remove(self, key: str) -> None:
        with self._lock:
            pod = self._pods.pop(key, None)
        if pod is not None:
            self._supervisor.stop(pod.process)
            log.info("kubelet stand-in: stopped the pod of %s", key)

    def _write_status(self, deployment: Any, *, ready: bool, replicas: int = 1) -> None:
        available = 1 if ready else 0
        status = deployment.status
        if (
            status is not None
            and status.observed_generation == deployment.metadata.generation
            and (status.available_replicas or 0) == available
            and (status.replicas or 0) == replicas
        ):
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {
            "type": "Available",
            "status": "True" if ready else "False",
            "reason": "MinimumReplicasAvailable" if ready else "MinimumReplicasUnavailable",
            "message": "host process (kubelet stand-in)",
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }
        body = {
            "status": {
                "observedGeneration": deployment.metadata.generation,
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": available,
                "availableReplicas": available,
                "unavailableReplicas": replicas - available,
                "conditions": [condition],
            }
        }
        self._api.patch_namespaced_deployment_status(deployment.metadata.name, deployment.metadata.namespace, body)
