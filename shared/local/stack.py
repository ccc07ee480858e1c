"""The whole pipeline on one machine: what ``kubeopera-tenants local`` and the end-to-end tests run.

``start_stack`` brings up, in order, and stops in reverse on exit, error or Ctrl-C:

1. the embedded control plane (etcd + kube-apiserver), unless ``kubeconfig`` names a cluster;
2. the OCI registry with the stand-in vcluster chart pushed (embedded control plane only);
3. ``deploy/crd``, the namespace, the RBAC of ``deploy/base/rbac`` and
   ``eventing/apiserversource-rbac.yaml`` and the admission policy of ``deploy/base/policy``;
   each function then runs with a token of its own ServiceAccount (TokenRequest API), so a
   missing RBAC rule fails here as it would in a cluster;
4. the kubeopera-api stand-in, unless ``kubeopera_api_url`` is given;
5. each function under gunicorn, started with the container image's own command (tenant-resync
   with ``K_SINK`` = the broker's address, as the SinkBinding of ``eventing/`` gives it);
6. the local broker, routing by the Trigger files in ``eventing/triggers``;
7. the vCluster stand-in (embedded control plane only);
8. the real Knative ApiServerSource adapter, watching Tenants, posting to the broker;
9. the resync tick of ``eventing/resync-pingsource.yaml`` every ``resync_seconds`` (and once at
   start, so a Tenant created while nothing ran is picked up).

Everything runs on 127.0.0.1 with ports picked free; logs go to ``<run_dir>/logs``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from shared.local.broker import Broker, load_triggers
from shared.local.ticker import Ticker
from shared.settings import Settings
from shared.testbed import controlplane as cp_mod
from shared.testbed.adapter import AdapterConfig, RunningAdapter, WatchedResource, start_adapter
from shared.testbed.api_standin import ApiStandIn
from shared.testbed.processes import HttpProbe, ManagedProcess, ProcessSpec, Supervisor, free_port, run
from shared.testbed.registry import helm_env, push_chart, start_registry
from shared.testbed.toolchain import Toolchain, ensure_all

TENANT_NAMESPACE = "kubeopera-system"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = Path(__file__).resolve().parents[1] / "testbed" / "chart"

# Knative Service name -> Python module in functions/ (the Services in deploy/base/services).
FUNCTIONS: Mapping[str, str] = {
    "tenant-install": "install",
    "tenant-check-ready": "check_ready",
    "tenant-store-kubeconfig": "store_kubeconfig",
    "tenant-notify-api": "notify_api",
    "tenant-dead-letter": "dead_letter",
    "tenant-cleanup": "cleanup",
    "tenant-resync": "resync",
}
SOURCE_SERVICE_ACCOUNT = "tenant-source"


class StackError(RuntimeError):
    """The local pipeline could not start; the message says which part and why."""


@dataclass(frozen=True)
class StackOptions:
    kubeopera_api_url: str | None = None
    api_token: str = field(default="", repr=False)
    vcluster_boot_seconds: float = 20.0
    vcluster_never_boot: str = ""  # releases matching this regular expression never boot
    kubeconfig: Path | None = None
    ready_poll_seconds: int = 15
    cleanup_poll_seconds: int = 5
    resync_seconds: float = 300.0  # the PingSource's schedule (every 5 minutes); 0 turns it off
    stuck_release_seconds: int = 180
    provision_timeout_seconds: int = 600
    run_dir: Path | None = None
    log_level: str = "INFO"


@dataclass(frozen=True)
class Stack:
    """What is running, and where."""

    admin_kubeconfig: Path
    run_dir: Path
    broker: Broker
    api: ApiStandIn | None
    api_url: str
    function_urls: Mapping[str, str]
    function_kubeconfigs: Mapping[str, Path]
    chart_ref: str
    tools: Toolchain
    supervisor: Supervisor
    control_plane: cp_mod.ControlPlane | None
    ticker: Ticker | None = None  # the resync PingSource's stand-in; tick() sends one now
    adapter: RunningAdapter | None = None
    function_specs: Mapping[str, ProcessSpec] = field(default_factory=dict)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """kubectl as admin; raises ``ProcessError`` with kubectl's stderr if it fails."""
        return kubectl(self.tools, self.admin_kubeconfig, *args, input=input)

    def log_dir(self) -> Path:
        return self.supervisor.log_dir

    def start_replica(self, service: str) -> tuple[ManagedProcess, str]:
        """One more process of a function, as another pod of its Knative Service would be (same
        environment and identity, its own port); returns it and its URL. The broker keeps
        delivering to the first one; tests post to this one directly."""
        spec = self.function_specs[service]
        port = free_port()
        env = dict(spec.env, PORT=str(port))
        replica = replace(spec, name=f"{service}-2", env=env)
        process = self.supervisor.start(replica, HttpProbe(f"http://127.0.0.1:{port}/readyz"), ready_timeout=120.0)
        return process, f"http://127.0.0.1:{port}/"


def kubectl(tools: Toolchain, kubeconfig: Path, *args: str, input: str | None = None) -> str:
    return run([str(tools.kubectl), f"--kubeconfig={kubeconfig}", *args], input=input).stdout


def project_path(*parts: str) -> Path:
    path = PROJECT_ROOT.joinpath(*parts)
    if not path.exists():
        raise StackError(f"{path} is missing: run from a clone of kubeopera-tenants (pip install -e .)")
    return path


def gunicorn_command(module: str) -> list[str]:
    """The container image's start command (Dockerfile ENTRYPOINT + the Service's args)."""
    gunicorn = Path(sys.executable).with_name("gunicorn")
    if not gunicorn.exists():
        found = shutil.which("gunicorn")
        if found is None:
            raise StackError("gunicorn is not installed next to this Python: pip install -e .")
        gunicorn = Path(found)
    return [str(gunicorn), "-c", "python:functions.gunicorn_conf", f"functions.{module}:create_app()"]


@contextlib.contextmanager
def start_stack(options: StackOptions) -> Iterator[Stack]:
    tools = ensure_all()
    owns_run_dir = options.run_dir is None
    run_dir = Path(tempfile.mkdtemp(prefix="kubeopera-local-")) if options.run_dir is None else options.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.ExitStack() as stack, Supervisor(run_dir) as sup:
            control_plane: cp_mod.ControlPlane | None = None
            if options.kubeconfig is None:
                control_plane = stack.enter_context(cp_mod.start_control_plane(tools, run_dir, supervisor=sup))
                admin = control_plane.admin_kubeconfig
                registry = stack.enter_context(start_registry(tools, run_dir, supervisor=sup))
                chart_ref = push_chart(tools, registry.url, CHART_DIR, run_dir)
            else:
                admin = options.kubeconfig
                chart_ref = Settings.from_env().chart_ref

            kubectl(tools, admin, "apply", "-f", str(project_path("deploy", "crd")))
            kubectl(tools, admin, "apply", "-f", str(project_path("deploy", "base", "namespace.yaml")))
            kubectl(tools, admin, "wait", "--for=condition=Established", "--timeout=60s", "crd/tenants.kubeopera.io")

            kubeconfigs = _identities(tools, admin, control_plane, run_dir)

            api: ApiStandIn | None = None
            api_url = options.kubeopera_api_url or ""
            if not api_url:
                api = stack.enter_context(ApiStandIn())
                api_url = api.url

            # The broker's address first: tenant-resync is told it (K_SINK) when it starts, and the
            # broker, which resolves its subscribers when it is made, starts after the functions.
            broker_port = free_port()
            broker_url = f"http://127.0.0.1:{broker_port}/"
            urls: dict[str, str] = {}

            specs: dict[str, ProcessSpec] = {}
            for service, module in FUNCTIONS.items():
                port = free_port()
                env = _function_env(options, tools, run_dir, service, chart_ref, api_url, port, kubeconfigs[service])
                env["K_SINK"] = broker_url  # what the SinkBinding gives tenant-resync
                specs[service] = ProcessSpec(name=service, argv=tuple(gunicorn_command(module)), env=env, cwd=run_dir)
                sup.start(specs[service], HttpProbe(f"http://127.0.0.1:{port}/readyz"), ready_timeout=120.0)
                urls[service] = f"http://127.0.0.1:{port}/"

            broker = Broker(load_triggers(project_path("eventing", "triggers")), resolve=urls.get)
            broker.start(port=broker_port)
            stack.callback(broker.stop)

            if control_plane is not None:
                sup.start(
                    ProcessSpec(
                        name="vcluster-standin",
                        argv=(
                            sys.executable,
                            "-m",
                            "shared.testbed.vcluster_standin",
                            "--kubeconfig",
                            str(admin),
                            "--boot-seconds",
                            str(options.vcluster_boot_seconds),
                            "--never-boot",
                            options.vcluster_never_boot,
                        ),
                    )
                )

            adapter = stack.enter_context(
                start_adapter(
                    tools,
                    kubeconfigs[SOURCE_SERVICE_ACCOUNT],
                    AdapterConfig(
                        sink=broker_url,
                        resources=(WatchedResource(group="kubeopera.io", version="v1alpha1", resource="tenants"),),
                        namespaces=(TENANT_NAMESPACE,),
                        name="tenant-source",
                        namespace=TENANT_NAMESPACE,
                    ),
                    run_dir,
                    supervisor=sup,
                )
            )
            ticker = None
            if options.resync_seconds > 0:
                ticker = Ticker(broker_url, project_path("eventing", "resync-pingsource.yaml"), options.resync_seconds)
                ticker.start()
                stack.callback(ticker.stop)
            yield Stack(
                admin_kubeconfig=admin,
                run_dir=run_dir,
                broker=broker,
                api=api,
                api_url=api_url,
                function_urls=urls,
                function_kubeconfigs=kubeconfigs,
                chart_ref=chart_ref,
                tools=tools,
                supervisor=sup,
                control_plane=control_plane,
                ticker=ticker,
                adapter=adapter,
                function_specs=specs,
            )
    finally:
        if owns_run_dir and not os.environ.get("KUBEOPERA_KEEP_RUN_DIR"):
            shutil.rmtree(run_dir, ignore_errors=True)


def _identities(
    tools: Toolchain, admin: Path, control_plane: cp_mod.ControlPlane | None, run_dir: Path
) -> dict[str, Path]:
    """A kubeconfig per function (and for the source) with its own ServiceAccount's token."""
    names = [*FUNCTIONS, SOURCE_SERVICE_ACCOUNT]
    if control_plane is None:
        return dict.fromkeys(names, admin)
    rbac = [
        project_path("deploy", "base", "rbac"),
        project_path("deploy", "base", "policy"),
        project_path("eventing", "apiserversource-rbac.yaml"),
    ]
    for path in rbac:
        kubectl(tools, admin, "apply", "-f", str(path))
    folder = run_dir / "identities"
    folder.mkdir(exist_ok=True)
    kubeconfigs = {}
    for name in names:
        token = cp_mod.request_token(control_plane, TENANT_NAMESPACE, name, duration="24h")
        kubeconfigs[name] = cp_mod.kubeconfig_for_token(
            control_plane, token, folder / f"{name}.kubeconfig", user=f"system:serviceaccount:{TENANT_NAMESPACE}:{name}"
        )
    return kubeconfigs


def _function_env(
    options: StackOptions,
    tools: Toolchain,
    run_dir: Path,
    service: str,
    chart_ref: str,
    api_url: str,
    port: int,
    kubeconfig: Path,
) -> dict[str, str]:
    env = helm_env(run_dir / "helm" / service)
    env.update(
        {
            "PORT": str(port),
            "KUBECONFIG": str(kubeconfig),
            "VCLUSTER_CHART": chart_ref,
            "VCLUSTER_CHART_VERSION": "0.21.2",
            "HELM_EXECUTABLE": str(tools.helm),
            "CHART_CACHE_DIR": str(run_dir / "charts" / service),
            "KUBEOPERA_API_BASE_URL": api_url,
            "INTERNAL_SERVICE_TOKEN": options.api_token,
            "ENVIRONMENT": "local",
            "READY_POLL_SECONDS": str(options.ready_poll_seconds),
            "CLEANUP_POLL_SECONDS": str(options.cleanup_poll_seconds),
            "STUCK_RELEASE_SECONDS": str(options.stuck_release_seconds),
            "PROVISION_TIMEOUT_SECONDS": str(options.provision_timeout_seconds),
            "LOG_LEVEL": options.log_level,
            "GUNICORN_THREADS": "4",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env
