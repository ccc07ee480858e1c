"""The real Knative ApiServerSource receive adapter, run as a local process against the test bed.

In a cluster, Knative's ApiServerSource controller runs ``apiserver_receive_adapter`` in a pod and
configures it through environment variables. Here :func:`start_adapter` does the same by hand:

- ``--kubeconfig=<file>`` (knative.dev/pkg's injection flag; it defaults to ``$KUBECONFIG``,
  which is set too), and ``-v=2`` so client-go's reflector logs ``"Caches populated"``;
- ``K_SINK`` (where CloudEvents go), ``NAME``/``NAMESPACE`` (the ApiServerSource's name and
  namespace), ``SYSTEM_NAMESPACE``, ``K_SOURCE_CONFIG`` (JSON: ``namespaces``, ``allNamespaces``,
  ``resources[].gvr`` with capitalised ``Group``/``Version``/``Resource`` keys, ``mode``), and
  ``K_LOGGING_CONFIG``.

Readiness: the adapter logs ``STARTING`` and then starts one reflector per (resource, namespace);
each logs ``"Caches populated"`` once its initial list is done, and from then on every change
is delivered (the reflector watches from the list's resourceVersion; the initial list itself is
*not* sent). :class:`AdapterReadyProbe` waits for that line for every reflector and fails fast
when the adapter reports that a resource does not exist.

Ports: the adapter serves health probes on ``:8080`` (all interfaces; the port is a constant in
knative.dev/pkg, no flag or variable changes it). It ignores a failure to bind it, so a second
adapter (or anything else holding 8080) only costs the health endpoint: events still flow. The
test bed never hands out 8080. The profiling server is created but not started; metrics and
tracing exporters are off by default (``K_OBSERVABILITY_CONFIG`` = ``{}``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.model.naming import DEFAULT_TENANT_NAMESPACE
from testbed.processes import (
    ManagedProcess,
    NotReadyError,
    ProcessSpec,
    Supervisor,
)
from testbed.toolchain import Toolchain

HEALTH_PORT = 8080
MODE_RESOURCE = "Resource"
MODE_REFERENCE = "Reference"


@dataclass(frozen=True)
class WatchedResource:
    """One kind to watch: its group, version and plural resource name, and a label selector."""

    version: str
    resource: str
    group: str = ""
    selector: str = ""

    def gvr(self) -> str:
        """client-go's ``GroupVersionResource.String()``: ``<group>/<version>, Resource=<resource>``."""
        return f"{self.group}/{self.version}, Resource={self.resource}"

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"gvr": {"Group": self.group, "Version": self.version, "Resource": self.resource}}
        if self.selector:
            entry["selector"] = self.selector
        return entry


@dataclass(frozen=True)
class AdapterConfig:
    """What one ApiServerSource adapter watches and where it sends events."""

    sink: str
    resources: tuple[WatchedResource, ...]
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    mode: str = MODE_RESOURCE
    name: str = "apiserversource"
    namespace: str = DEFAULT_TENANT_NAMESPACE
    system_namespace: str = "knative-eventing"
    log_level: str = "info"
    ce_overrides: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.resources:
            raise ValueError("an ApiServerSource adapter needs at least one resource to watch")
        # No namespaces and not all of them: a namespaceSelector that matches none yet. The real
        # adapter then starts no reflector and is ready at once; Knative's controller gives it the
        # list again when a namespace that matches appears (which restarts it).

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> AdapterConfig:
        """What a Deployment made by Knative's ApiServerSource controller configures (its env)."""
        source = json.loads(env["K_SOURCE_CONFIG"])
        resources = tuple(
            WatchedResource(
                group=r["gvr"].get("Group", ""),
                version=r["gvr"]["Version"],
                resource=r["gvr"]["Resource"],
                selector=r.get("selector") or "",
            )
            for r in source["resources"]
        )
        return cls(
            sink=env.get("K_SINK", ""),
            resources=resources,
            namespaces=tuple(source.get("namespaces") or ()),
            all_namespaces=bool(source.get("allNamespaces")),
            mode=source.get("mode", MODE_RESOURCE),
            name=env.get("NAME", "apiserversource"),
            namespace=env.get("NAMESPACE", DEFAULT_TENANT_NAMESPACE),
        )

    def source_config(self) -> dict[str, Any]:
        """The ``K_SOURCE_CONFIG`` document."""
        return {
            "namespaces": list(self.namespaces),
            "allNamespaces": self.all_namespaces,
            "resources": [r.to_json() for r in self.resources],
            "mode": self.mode,
        }

    def environment(self, kubeconfig: Path) -> dict[str, str]:
        """Every environment variable the adapter reads, as the Knative controller would set them."""
        logging_config = {
            "zap-logger-config": json.dumps(
                {
                    "level": self.log_level,
                    "development": False,
                    "outputPaths": ["stdout"],
                    "errorOutputPaths": ["stderr"],
                    "encoding": "json",
                    "encoderConfig": {
                        "timeKey": "ts",
                        "levelKey": "level",
                        "nameKey": "logger",
                        "callerKey": "caller",
                        "messageKey": "msg",
                        "stacktraceKey": "stacktrace",
                        "lineEnding": "",
                        "levelEncoder": "",
                        "timeEncoder": "iso8601",
                        "durationEncoder": "",
                        "callerEncoder": "",
                    },
                }
            ),
            f"loglevel.{self.name}": self.log_level,
        }
        env = {
            "KUBECONFIG": str(kubeconfig),
            "K_SINK": self.sink,
            "NAME": self.name,
            "NAMESPACE": self.namespace,
            "SYSTEM_NAMESPACE": self.system_namespace,
            "K_SOURCE_CONFIG": json.dumps(self.source_config()),
            "K_LOGGING_CONFIG": json.dumps(logging_config),
            "K_OBSERVABILITY_CONFIG": "{}",
        }
        if self.ce_overrides:
            env["K_CE_OVERRIDES"] = json.dumps({"extensions": dict(self.ce_overrides)})
        return env

    def reflector_names(self) -> tuple[tuple[str, ...], ...]:
        """Per resource, the reflector names the adapter may use (namespaced or cluster-wide)."""
        names: list[tuple[str, ...]] = []
        for resource in self.resources:
            if self.all_namespaces:
                names.append((resource.gvr(),))
            else:
                names.append(tuple(f"{resource.gvr()}/{ns}" for ns in self.namespaces))
        return tuple(names)


@dataclass(frozen=True)
class AdapterReadyProbe:
    """Ready once every reflector of the adapter has logged ``"Caches populated"``."""

    config: AdapterConfig

    def ready(self, process: ManagedProcess) -> bool:
        text = process.log_text()
        if "could not retrieve information about resource" in text or "failed to collect resource" in text:
            raise NotReadyError(
                f"{process.name}: the API server does not serve a watched resource; "
                f"last lines of {process.log_path}:\n{process.log_tail()}"
            )
        populated = {
            line.split('reflector="', 1)[1].rsplit('"', 1)[0]
            for line in text.splitlines()
            if "Caches populated" in line and 'reflector="' in line
        }
        for resource, namespaced_names in zip(self.config.resources, self.config.reflector_names(), strict=True):
            cluster_wide = resource.gvr()
            if cluster_wide in populated:
                continue
            if not all(name in populated for name in namespaced_names):
                return False
        return True

    def describe(self) -> str:
        return 'log "Caches populated" for every watched resource'


@dataclass(frozen=True)
class RunningAdapter:
    """A started adapter process."""

    config: AdapterConfig
    process: ManagedProcess

    @property
    def log_path(self) -> Path:
        return self.process.log_path


@contextlib.contextmanager
def start_adapter(
    tools: Toolchain,
    kubeconfig: Path,
    config: AdapterConfig,
    workdir: Path,
    *,
    supervisor: Supervisor | None = None,
    process_name: str = "apiserver-adapter",
    ready_timeout: float = 60.0,
) -> Iterator[RunningAdapter]:
    """Run the receive adapter with ``kubeconfig`` until the block ends; wait for its watches."""
    with contextlib.ExitStack() as stack:
        sup = supervisor if supervisor is not None else stack.enter_context(Supervisor(Path(workdir)))
        process = sup.start(
            ProcessSpec(
                name=process_name,
                argv=(str(tools.apiserver_adapter), f"--kubeconfig={kubeconfig}", "-v=2"),
                env=config.environment(Path(kubeconfig)),
                cwd=Path(workdir),
            ),
            AdapterReadyProbe(config),
            ready_timeout=ready_timeout,
        )
        stack.callback(sup.stop, process)
        yield RunningAdapter(config=config, process=process)
