"""The exact command the image runs serves every function from the installed package.

No image can be built here, so this does what the Dockerfile does, short of the container: it
builds the runtime wheel as the Dockerfile's ``wheel`` stage does (tests/deploy/wheel.py),
installs it into a folder of its own, and then, for every Knative Service in
deploy/base/services, runs the Service's command and args (checked equal to the Dockerfile's
ENTRYPOINT by test_manifests.py) from an empty working folder, with the Service's environment and
the ConfigMap's settings, on a free port. Each function must answer /healthz, /readyz and
/metrics, and stop cleanly on SIGTERM, as Knative stops it.

Differences from the pod, on purpose: the Kubernetes client gets a kubeconfig (nothing is
called) instead of in-cluster credentials, helm is the test bed's helm v3.16.4 (the image's
comes from get.helm.sh), the chart is the test bed's stand-in (so install's /readyz, which needs
the chart, can pass offline), and helm's folders are remapped into the test's tmp folder.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from testbed import toolchain
from testbed.project import CHART_DIR

from .manifests import DEPLOY, EVENTING, FUNCTION_MODULES, SERVICES, dockerfile_env, file_documents, objects_of
from .serving import stop

HELM_HOME = "/var/lib/kubeopera/helm"
START_TIMEOUT = 60.0
DUMMY_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: not-used}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _environment(service: dict[str, Any], site: Path, work: Path, port: int) -> dict[str, str]:
    (container,) = service["spec"]["template"]["spec"]["containers"]
    config = objects_of(file_documents(DEPLOY / "base" / "config.yaml"), "ConfigMap")["tenant-functions-config"]
    helm_bin = toolchain.ensure("helm")
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(DUMMY_KUBECONFIG)
    env = {
        "PATH": os.pathsep.join([str(helm_bin), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(work),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(site),
        "PYTHONDONTWRITEBYTECODE": "1",
        "KUBECONFIG": str(kubeconfig),
        "PORT": str(port),  # Knative sets it from the container port
        "K_SERVICE": service["metadata"]["name"],
    }
    # The image's ENV (helm's folders and the chart cache among it), then the ConfigMap's settings
    # and the Service's own env, as the container sees them; helm's home remapped into tmp.
    for name, value in dockerfile_env().items():
        if name not in ("HOME", "PORT"):
            env[name] = value.replace(HELM_HOME, str(work / "helm"))
    env.update(config["data"])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"].replace(HELM_HOME, str(work / "helm"))
    env["VCLUSTER_CHART"] = str(CHART_DIR)
    # No API server here: install takes the host's Service range from the setting instead of
    # reading the cluster's ServiceCIDRs at start (shared/model/service_range.py).
    env["SERVICE_CIDR"] = "10.96.0.0/12"
    bindings = [doc for path in sorted(EVENTING.glob("*-sinkbinding.yaml")) for doc in file_documents(path)]
    for binding in objects_of(bindings, "SinkBinding").values():
        if binding["spec"]["subject"]["name"] == service["metadata"]["name"]:
            env["K_SINK"] = "http://broker-ingress.knative-eventing.svc.cluster.local/kubeopera-system/default"
    return env


@pytest.mark.parametrize("name", sorted(FUNCTION_MODULES))
def test_start_command_serves_the_function(name: str, installed_site: Path, tmp_path: Path) -> None:
    (service,) = file_documents(SERVICES / f"{name}.yaml")
    (container,) = service["spec"]["template"]["spec"]["containers"]
    argv = [*container["command"], *container["args"]]
    port = _free_port()
    env = _environment(service, installed_site, tmp_path, port)
    assert shutil.which(argv[0], path=env["PATH"]), f"{argv[0]} is not installed"

    # The functions come from the installed package, not from the source tree.
    where = subprocess.run(
        [sys.executable, "-c", "import functions, shared; print(functions.__file__); print(shared.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert all(Path(line).is_relative_to(installed_site) for line in where.stdout.split()), where.stdout

    log = tmp_path / "gunicorn.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + START_TIMEOUT
            status = 0
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    status, _ = _get(f"{base}/healthz")
                except OSError:
                    status = 0
                if status == 200:
                    break
                time.sleep(0.2)
            assert status == 200, f"{name} did not come up:\n{log.read_text(errors='replace')}"
            # The vCluster watch is ready once its first LIST is in, and there is no API server here.
            expected = 503 if FUNCTION_MODULES[name] == "vcluster_watch" else 200
            assert _get(f"{base}/readyz")[0] == expected, log.read_text(errors="replace")
            code, body = _get(f"{base}/metrics")
            assert code == 200 and "# TYPE" in body
        finally:
            returncode = stop(proc)
    assert returncode == 0, f"{name} did not stop cleanly on SIGTERM:\n{log.read_text(errors='replace')}"
    text = log.read_text(errors="replace")
    assert f"Listening at: http://0.0.0.0:{port}" in text
    assert "Using worker: gthread" in text
    assert "Traceback" not in text, text
