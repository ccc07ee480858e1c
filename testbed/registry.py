"""A real OCI registry on loopback (distribution v3) and pushing the stand-in vcluster chart to it.

:func:`start_registry` writes a registry config of its own (filesystem storage in the run folder,
``http.addr`` on a free 127.0.0.1 port, no debug/metrics listener, tracing export off), starts
``registry serve`` and waits for ``GET /v2/``. :func:`push_chart` packages a chart folder with
``helm package`` and ``helm push``-es it, returning the reference to install it by
(``oci://127.0.0.1:<port>/charts/vcluster``). Helm's cache, config and data folders for these
calls live in the run folder (:func:`helm_env`); ``~/.config/helm`` is never touched.

helm v3.16.4 talks plain HTTP to a registry on 127.0.0.1/localhost by itself (checked by the
test bed's tests), so neither ``helm push`` nor pyhelm3's pulls need ``--plain-http``. Anywhere
else helm wants HTTPS: the cluster tier, whose pods reach the registry on the node address, starts
it with ``tls`` (a certificate of the test bed's CA, :class:`RegistryTLS`), and helm in the pods
trusts that CA through ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import yaml

from testbed.processes import HttpProbe, ProcessSpec, Supervisor, free_port, run
from testbed.toolchain import Toolchain

CHART_NAME = "vcluster"
CHART_VERSION = "0.21.2"
CHART_REPOSITORY = "charts"


@dataclass(frozen=True)
class RegistryTLS:
    """The registry's serving certificate and key, and the CA file that verifies them."""

    cert_file: Path
    key_file: Path
    ca_file: Path


@dataclass(frozen=True)
class Registry:
    """A running registry: ``url`` is ``http(s)://<address>:<port>``, ``host`` is ``<address>:<port>``."""

    url: str
    host: str
    port: int
    storage_dir: Path
    config_file: Path
    ca_file: Path | None = None  # with TLS: the CA that verifies it

    def oci(self, path: str = "") -> str:
        """``oci://<host>/<path>``."""
        return f"oci://{self.host}/{path}".rstrip("/")


def helm_env(folder: Path) -> dict[str, str]:
    """HELM_CACHE_HOME / HELM_CONFIG_HOME / HELM_DATA_HOME (and the registry/repository files)
    pointing into ``folder``, which is created."""
    folder = Path(folder)
    env = {
        "HELM_CACHE_HOME": str(folder / "cache"),
        "HELM_CONFIG_HOME": str(folder / "config"),
        "HELM_DATA_HOME": str(folder / "data"),
    }
    env["HELM_REGISTRY_CONFIG"] = str(folder / "config" / "registry" / "config.json")
    env["HELM_REPOSITORY_CONFIG"] = str(folder / "config" / "repositories.yaml")
    env["HELM_REPOSITORY_CACHE"] = str(folder / "cache" / "repository")
    for key in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    return env


@contextlib.contextmanager
def start_registry(
    tools: Toolchain,
    workdir: Path,
    *,
    supervisor: Supervisor | None = None,
    ready_timeout: float = 60.0,
    address: str = "127.0.0.1",
    tls: RegistryTLS | None = None,
) -> Iterator[Registry]:
    """Start a registry with storage under ``workdir``, listening on ``address`` (over HTTPS with
    ``tls``); stop it when the block ends."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        sup = supervisor if supervisor is not None else stack.enter_context(Supervisor(workdir))
        port = free_port()
        storage = workdir / "registry-storage"
        storage.mkdir(parents=True, exist_ok=True)
        config = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(storage)},
                "delete": {"enabled": True},
                "maintenance": {"uploadpurging": {"enabled": False}},
            },
            "http": {"addr": f"{address}:{port}"}
            | ({"tls": {"certificate": str(tls.cert_file), "key": str(tls.key_file)}} if tls else {}),
            "health": {"storagedriver": {"enabled": False}},
        }
        config_file = workdir / "registry-config.yml"
        config_file.write_text(yaml.safe_dump(config))
        url = f"{'https' if tls else 'http'}://{address}:{port}"
        process = sup.start(
            ProcessSpec(
                name="registry",
                argv=(str(tools.registry), "serve", str(config_file)),
                # No OpenTelemetry exporter: by default it would try localhost:4318 forever.
                env={"OTEL_TRACES_EXPORTER": "none", "OTEL_SDK_DISABLED": "true"},
            ),
            HttpProbe(f"{url}/v2/", ca_file=tls.ca_file if tls else None),
            ready_timeout=ready_timeout,
        )
        stack.callback(sup.stop, process)
        yield Registry(
            url=url,
            host=f"{address}:{port}",
            port=port,
            storage_dir=storage,
            config_file=config_file,
            ca_file=tls.ca_file if tls else None,
        )


def push_chart(
    tools: Toolchain,
    registry_url: str,
    chart_dir: Path,
    workdir: Path,
    *,
    repository: str = CHART_REPOSITORY,
    plain_http: bool = False,
    ca_file: Path | None = None,
) -> str:
    """``helm package`` + ``helm push`` ``chart_dir`` to ``registry_url``; return its oci:// reference.

    ``registry_url`` is ``http://127.0.0.1:<port>`` (or just ``127.0.0.1:<port>``).
    """
    host = _host(registry_url)
    workdir = Path(workdir)
    env = helm_env(workdir / "helm")
    packages = workdir / "chart-packages"
    packages.mkdir(parents=True, exist_ok=True)
    chart = yaml.safe_load((Path(chart_dir) / "Chart.yaml").read_text())
    name, version = str(chart["name"]), str(chart["version"])
    run([str(tools.helm), "package", str(chart_dir), "--destination", str(packages)], env=env)
    archive = packages / f"{name}-{version}.tgz"
    if not archive.is_file():
        raise FileNotFoundError(f"helm package did not write {archive}")
    args = [str(tools.helm), "push", str(archive), f"oci://{host}/{repository}"]
    if plain_http:
        args.append("--plain-http")
    if ca_file is not None:
        args.append(f"--ca-file={ca_file}")
    run(args, env=env)
    return f"oci://{host}/{repository}/{name}"


def _host(registry_url: str) -> str:
    if re.match(r"^[a-z][a-z0-9+.-]*://", registry_url):
        parsed = urlparse(registry_url)
        if not parsed.netloc:
            raise ValueError(f"no host in registry URL {registry_url!r}")
        return parsed.netloc
    return registry_url.rstrip("/")
