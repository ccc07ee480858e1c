"""Each function as the pod of its Knative Service would run it, as a host process: the container
image's command under gunicorn, the settings the ConfigMap gives, a token of its own ServiceAccount,
the cluster network through the service proxy, and ``K_SINK`` = the Broker's address (what the
SinkBinding in ``eventing/`` injects into tenant-resync; its reconciler lives in Knative's webhook,
which does not run here), with ``SINK_TOKEN_FILE`` where the SinkBinding would mount its token; and
who may deliver to it (``SENDER_IDENTITY``, ``SENDER_AUDIENCE``, ``SENDER_SUBJECTS``: :mod:`.senders`)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from testbed.local.errors import StackError
from testbed.local.options import StackOptions
from testbed.processes import HttpProbe, ManagedProcess, ProcessSpec, Supervisor, free_port, wait_ready
from testbed.registry import helm_env
from testbed.standins.service_proxy import ServiceProxy
from testbed.toolchain import Toolchain

READY_TIMEOUT = 120.0


def gunicorn_command(module: str, profiled: bool = False) -> list[str]:
    """The container image's start command (Dockerfile ENTRYPOINT + the Service's args); with
    ``profiled``, the same app behind :mod:`.profiling`'s wrapper."""
    gunicorn = Path(sys.executable).with_name("gunicorn")
    if not gunicorn.exists():
        found = shutil.which("gunicorn")
        if found is None:
            raise StackError("gunicorn is not installed next to this Python: pip install -e .")
        gunicorn = Path(found)
    app = f"functions.{module}:create_app()"
    if profiled:
        app = f"testbed.local.profiling:create_app('functions.{module}')"
    return [str(gunicorn), "-c", "python:functions.gunicorn_conf", app]


def function_specs(
    options: StackOptions,
    tools: Toolchain,
    run_dir: Path,
    functions: Mapping[str, str],
    kubeconfigs: Mapping[str, Path],
    chart_ref: str,
    api_url: str,
    proxy: ServiceProxy,
    broker_address: str,
    sender_env: Mapping[str, Mapping[str, str]],
    sink_tokens: Mapping[str, Path],
    mount_env: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, ProcessSpec]:
    """Knative Service name -> its process, each on a free port of its own. ``sender_env`` is each
    one's SENDER_* settings, ``sink_tokens`` the token file of those a SinkBinding binds,
    ``mount_env`` the settings of its ConfigMap mounts (:mod:`.mounts`)."""
    unknown = sorted(set(options.profile) - set(functions))
    if unknown:
        raise StackError(f"no function to profile named {', '.join(unknown)} (there are {', '.join(functions)})")
    unknown = sorted(set(options.service_env) - set(functions))
    if unknown:
        raise StackError(f"environment for no function: {', '.join(unknown)} (there are {', '.join(functions)})")
    specs: dict[str, ProcessSpec] = {}
    for service, module in functions.items():
        port = free_port()
        env = _function_env(options, tools, run_dir, service, chart_ref, api_url, port, kubeconfigs[service])
        env.update(_cluster_network(proxy))
        env["K_SERVICE"] = service  # as Knative Serving sets it in each revision's container
        env["K_SINK"] = broker_address  # what the SinkBinding in eventing/ injects into tenant-resync
        if service in sink_tokens:
            env["SINK_TOKEN_FILE"] = str(sink_tokens[service])  # where the SinkBinding mounts /oidc/token
        env.update(sender_env.get(service, {}))
        env.update((mount_env or {}).get(service, {}))
        env.update(options.function_env)  # the caller's word is last
        env.update(options.service_env.get(service, {}))  # and its word for this function after that
        profiled = service in options.profile
        if profiled:
            env["PROFILE_DIR"] = str(options.profile_dir or run_dir / "profiles")
        argv = tuple(gunicorn_command(module, profiled))
        specs[service] = ProcessSpec(name=service, argv=argv, env=env, cwd=run_dir)
    return specs


def port_of(spec: ProcessSpec) -> int:
    return int(spec.env["PORT"])


def url_of(spec: ProcessSpec) -> str:
    return f"http://127.0.0.1:{port_of(spec)}/"


def start_functions(supervisor: Supervisor, specs: Mapping[str, ProcessSpec]) -> None:
    """All at once, as a Knative Service's pods start: they import the same modules side by side;
    returns when each answers ``/readyz``."""
    started = {service: supervisor.start(spec) for service, spec in specs.items()}
    for service, process in started.items():
        wait_ready(process, HttpProbe(f"{url_of(specs[service])}readyz"), timeout=READY_TIMEOUT)


def start_replica(
    supervisor: Supervisor, spec: ProcessSpec, name: str, env: Mapping[str, str] | None = None
) -> tuple[ManagedProcess, str]:
    """Another process of the same function (same environment, with ``env`` over it, and the same
    identity, its own port), ready; returns it and its URL."""
    port = free_port()
    replica = replace(spec, name=name, env=dict(spec.env) | dict(env or {}) | {"PORT": str(port)})
    process = supervisor.start(replica, HttpProbe(f"http://127.0.0.1:{port}/readyz"), ready_timeout=READY_TIMEOUT)
    return process, url_of(replica)


def _cluster_network(proxy: ServiceProxy) -> dict[str, str]:
    """A pod's view of the cluster network: Service names through the proxy (HTTPS to a Service,
    a vCluster's API, as a CONNECT tunnel), loopback direct."""
    return {
        "HTTP_PROXY": proxy.url,
        "http_proxy": proxy.url,
        "HTTPS_PROXY": proxy.url,
        "https_proxy": proxy.url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


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
            "HELM_DEADLINE_SECONDS": str(options.helm_deadline_seconds),
            "PROVISION_TIMEOUT_SECONDS": str(options.provision_timeout_seconds),
            "LOG_LEVEL": options.log_level,
            "GUNICORN_THREADS": "4",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env
