"""The function image the test bed builds (testbed.images.function) is the Dockerfile's image.

Fast: its config (no build needed) has the Dockerfile's last stage's ENV, USER, WORKDIR, EXPOSE and
ENTRYPOINT, the wheel is built from what the Dockerfile's ``wheel`` stage copies, the folders the
Dockerfile gives to the app user are the ones the builder gives it, and every Knative Service in
deploy/base/services runs that entry point as that user.

Integration (root only: it uses chroot): the image built for real, its layer unpacked as a
container runtime would, and, as uid 65532 in a chroot of it, the interpreter, the packages,
helm through ``/bin/sh`` and ``timeout`` (as ``shared.adapters.helm`` runs it), the writable
folders, and each Service's start command serving ``/healthz`` and stopping on SIGTERM.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.helm import deadline_wrapper
from testbed import toolchain
from testbed.images import FUNCTION_IMAGE, build_function_image, extract_layer, function_image_config, read_image
from testbed.images import function as fn
from testbed.images.interpreter import PREFIX
from testbed.images.wheel import WHEEL_SOURCES

from .manifests import (
    DEPLOY,
    DOCKERFILE,
    FUNCTION_MODULES,
    SERVICES,
    dockerfile_entrypoint,
    dockerfile_env,
    file_documents,
    objects_of,
)
from .serving import stop
from .wheel import wheel_stage_sources

START_TIMEOUT = 60.0
# What the Dockerfile's image has from python:3.11-slim rather than from its own ENV.
BASE_IMAGE_ENV = {"PATH", "LANG"}


def _last_stage() -> str:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    return re.split(r"^FROM\s", text, flags=re.M)[-1]


def _instruction(name: str) -> str:
    """The argument of the last ``name`` instruction of the Dockerfile's last stage."""
    found = re.findall(rf"^{name}\s+(.+?)\s*$", _last_stage(), re.M)
    assert found, f"the Dockerfile's last stage has no {name}"
    return str(found[-1])


def _services() -> dict[str, dict[str, Any]]:
    return {path.stem: file_documents(path)[0] for path in sorted(SERVICES.glob("*.yaml"))}


# ----------------------------------------------------------------------------- the config


def test_image_config_is_the_dockerfiles() -> None:
    config = function_image_config()
    env = config.env_map()
    for name, value in dockerfile_env().items():
        assert env.get(name) == value, f"ENV {name}={value} (Dockerfile) but the image has {env.get(name)!r}"
    assert set(env) - set(dockerfile_env()) == BASE_IMAGE_ENV, "only python:slim's PATH and LANG come on top"
    assert env["PATH"].split(":")[0] == "/usr/local/bin", "python:slim puts /usr/local/bin first"
    assert list(config.entrypoint) == dockerfile_entrypoint()
    assert config.user == _instruction("USER")
    assert config.working_dir == _instruction("WORKDIR")
    exposed = {p if "/" in p else f"{p}/tcp" for p in _instruction("EXPOSE").split()}
    assert set(config.exposed_ports) == exposed
    assert config.cmd == (), "the Knative Service passes the app as args"
    helm_vars = ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME", "CHART_CACHE_DIR")
    assert all(env[var].startswith(fn.HELM_HOME + "/") for var in helm_vars), "under the folder owned by 65532"


def test_image_is_built_like_the_dockerfiles() -> None:
    assert list(WHEEL_SOURCES) == wheel_stage_sources(DOCKERFILE.read_text(encoding="utf-8"))
    stage = _last_stage()
    (useradd,) = re.findall(r"useradd (.*?)(?:&&|$)", stage, re.M)
    assert f"--uid {fn.APP.uid}" in useradd and f"--gid {fn.APP.gid}" in useradd
    assert f"--home-dir {fn.APP.home}" in useradd and useradd.split()[-1] == fn.APP.name
    (install_dir,) = re.findall(r"install -d -o (\d+) -g (\d+) (\S+)", stage)
    assert install_dir == (str(fn.APP.uid), str(fn.APP.gid), fn.HELM_HOME)
    assert f"{fn.APP.uid}:{fn.APP.gid}" == function_image_config().user
    assert "/usr/local/bin/helm" in stage and f"{PREFIX}/bin/helm" == "/usr/local/bin/helm"


@pytest.mark.parametrize("name", sorted(FUNCTION_MODULES))
def test_service_runs_the_images_entrypoint_as_its_user(name: str) -> None:
    config = function_image_config()
    spec = _services()[name]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] == list(config.entrypoint), "the Service spells out the image's ENTRYPOINT"
    uid, gid = (int(part) for part in config.user.split(":"))
    security = container["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (uid, gid)
    assert security["runAsNonRoot"] is True and uid != 0
    ports = {f"{p['containerPort']}/{p.get('protocol', 'TCP').lower()}" for p in container["ports"]}
    assert ports <= set(config.exposed_ports)


# ----------------------------------------------------------------------------- the built image


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def function_image() -> Path:
    """The function image, built (or found built) in the tools cache beside the toolchain."""
    return build_function_image(toolchain.ensure("helm") / "helm", toolchain.cache_root() / "images")


@pytest.fixture(scope="session")
def image_root(function_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's layer unpacked with its owners, as a container runtime lays it out."""
    if os.geteuid() != 0:
        pytest.skip("running the image in a chroot needs root (chroot, and files owned by 65532)")
    root = tmp_path_factory.mktemp("function-image") / "rootfs"
    extract_layer(function_image, root)
    return root


def _in_image(root: Path, script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a /bin/sh script in the image as the image's user, from its working folder, with its env."""
    config = function_image_config()
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    argv = [chroot, f"--userspec={config.user}", str(root), "/bin/sh", "-c", f"cd {config.working_dir} && {script}"]
    full_env = {**config.env_map(), **(env or {})}
    return subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_image_is_named_and_configured(function_image: Path) -> None:
    layout = read_image(function_image)
    assert layout.ref == FUNCTION_IMAGE
    assert layout.config["config"] == function_image_config().document()


# Run in the image as the app user: the packages import, who it is, where it may write.
CHECKS = """\
import os, pwd, sqlite3, ssl, sys
import cloudevents, flask, functions.install, kubernetes, opentelemetry.sdk, pyhelm3, shared.adapters.kube
print(sys.prefix)
print(pwd.getpwuid(os.getuid()).pw_name, os.path.expanduser("~"))
for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME", "CHART_CACHE_DIR"):
    os.makedirs(os.environ[var], exist_ok=True)
open("/tmp/written-by-app", "w").close()
try:
    open("/usr/local/lib/written-by-app", "w")
except PermissionError:
    print("root-owned files are read-only")
"""


@pytest.mark.integration
def test_image_runs_the_packages_and_helm_as_the_app_user(image_root: Path) -> None:
    (image_root / "tmp" / "checks.py").write_text(CHECKS)
    deadline_wrapper("helm", 60, image_root / "tmp" / "bin")  # as shared.adapters.helm makes it in the pod
    checks = "python3.11 /tmp/checks.py && gunicorn --version && /tmp/bin/helm-with-deadline version --short"
    result = _in_image(image_root, checks)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == ["/usr/local", "app /home/app", "root-owned files are read-only"], result.stdout
    assert lines[3].startswith("gunicorn (version 23."), result.stdout
    assert lines[4] == toolchain.HELM_VERSION, "helm runs through /bin/sh and timeout, as shared.adapters.helm runs it"
    scripts = image_root / "usr" / "local" / "bin"
    assert (scripts / "gunicorn").read_text().startswith("#!/usr/local/bin/python3.11\n")


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(FUNCTION_MODULES))
def test_start_command_serves_in_the_image(name: str, image_root: Path) -> None:
    service = _services()[name]
    (container,) = service["spec"]["template"]["spec"]["containers"]
    config_map = objects_of(file_documents(DEPLOY / "base" / "config.yaml"), "ConfigMap")["tenant-functions-config"]
    kubeconfig = image_root / "tmp" / f"kubeconfig-{name}"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        'clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]\n'
        "users: [{name: none, user: {token: not-used}}]\n"
        "contexts: [{name: none, context: {cluster: none, user: none}}]\ncurrent-context: none\n"
    )
    os.chmod(kubeconfig, 0o644)
    port = _free_port()
    env = {**config_map["data"], "KUBECONFIG": f"/tmp/{kubeconfig.name}", "PORT": str(port), "K_SERVICE": name}
    # No API server here: install takes the host's Service range from the setting instead of
    # reading the cluster's ServiceCIDRs at start (shared/model/service_range.py).
    env["SERVICE_CIDR"] = "10.96.0.0/12"
    env["K_SINK"] = "http://broker-ingress.knative-eventing.svc.cluster.local/kubeopera-system/default"  # SinkBinding
    env.update({item["name"]: item["value"] for item in container.get("env", []) if "value" in item})
    config = function_image_config()
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    start = " ".join(f"'{arg}'" for arg in [*container["command"], *container["args"]])
    argv = [
        chroot,
        f"--userspec={config.user}",
        str(image_root),
        "/bin/sh",
        "-c",
        f"cd {config.working_dir} && exec {start}",
    ]
    log_path = kubeconfig.with_name(f"gunicorn-{name}.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, env={**config.env_map(), **env}, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline, status = time.monotonic() + START_TIMEOUT, 0
            while time.monotonic() < deadline and proc.poll() is None and status != 200:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                        status = response.status
                except (OSError, urllib.error.HTTPError):
                    time.sleep(0.2)
            assert status == 200, f"{name} did not serve /healthz:\n{log_path.read_text(errors='replace')}"
        finally:
            returncode = stop(proc)
    text = log_path.read_text(errors="replace")
    assert returncode == 0, f"{name} did not stop cleanly on SIGTERM:\n{text}"
    assert f"Listening at: http://0.0.0.0:{port}" in text and "Using worker: gthread" in text
    assert "Traceback" not in text, text
