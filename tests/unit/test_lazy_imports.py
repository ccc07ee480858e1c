"""What a function's process loads: helm's client only where a function runs helm, the
OpenTelemetry SDK only when tracing is on (cold start and memory, bench/coldstart.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HELM_FREE = (
    "functions.check_ready",
    "functions.store_kubeconfig",
    "functions.notify_api",
    "functions.dead_letter",
    "functions.resync",
)


def loaded(statement: str, *modules: str) -> dict[str, bool]:
    probe = f"import sys\n{statement}\nprint(*[m in sys.modules for m in {modules!r}])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(modules, (word == "True" for word in out), strict=True))


@pytest.mark.parametrize("module", HELM_FREE)
def test_a_function_that_runs_no_helm_does_not_load_its_client(module: str) -> None:
    helm = "shared.adapters.helm"
    assert loaded(f"import {module}", "pyhelm3", helm) == {"pyhelm3": False, helm: False}


def test_a_function_that_runs_helm_loads_it() -> None:
    assert loaded("import functions.install", "pyhelm3")["pyhelm3"] is True


def test_the_tracing_sdk_is_loaded_only_when_tracing_is_on() -> None:
    off = "from shared.observability import tracing\nassert not tracing.configure('t', {})"
    on = "from shared.observability import tracing\nassert tracing.configure('t', {'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:9'})"
    assert loaded(off, "opentelemetry.sdk.trace")["opentelemetry.sdk.trace"] is False
    assert loaded(on, "opentelemetry.sdk.trace")["opentelemetry.sdk.trace"] is True


def test_the_schema_check_loads_jsonschema_only_when_it_runs() -> None:
    """install checks its plans against the chart's schema at its first readiness with the chart,
    not as its worker starts (shared.adapters.values_schema)."""
    assert loaded("import functions.install", "jsonschema")["jsonschema"] is False


@pytest.mark.parametrize("module", ["functions.router", *HELM_FREE, "functions.install"])
def test_a_function_loads_the_kubernetes_client_a_part_at_a_time(module: str) -> None:
    """Not the 767 models and 65 API modules that ``import kubernetes`` loads (shared.adapters.kube.client)."""
    probe = (
        f"import sys\nimport {module}\n"
        "models = [m for m in sys.modules if m.startswith('kubernetes.client.models.')]\n"
        "apis = [m for m in sys.modules if m.startswith('kubernetes.client.api.')]\n"
        "print(len(models), len(apis), 'kubernetes.client.api.batch_v1_api' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    models, apis, batch = int(out[0]), int(out[1]), out[2] == "True"
    assert models < 20 and apis <= 10 and not batch, out


def test_every_name_of_the_client_resolves_through_the_lazy_packages() -> None:
    """Each name the real ``__init__`` files import is there, and is the real object (a newer
    client with another layout fails here, not in a function at its first request)."""
    probe = """
import importlib
from pathlib import Path
from shared.adapters.kube import client
import importlib.util
import kubernetes.client
assert kubernetes.client.__doc__.endswith("(shared.adapters.kube.client)"), "the lazy package"
for fullname in client.LAZY:  # found as the real packages are (tests/deploy/test_wheel.py asks)
    spec = importlib.util.find_spec(fullname)
    assert spec is not None and spec.submodule_search_locations == importlib.import_module(fullname).__path__
assert importlib.util.find_spec("kubernetes.client.exceptions") is not None
count = 0
for fullname in client.LAZY[1:]:
    package = importlib.import_module(fullname)
    for name, module in client.names_in(Path(package.__file__)).items():
        assert getattr(package, name) is getattr(importlib.import_module(module), name), (fullname, name)
        count += 1
print(count)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert int(out) > 1500


def test_the_clients_deserializer_finds_its_models_through_the_lazy_package() -> None:
    probe = """
import json
from shared.adapters.kube.client import k8s
class Answer:
    data = json.dumps({"metadata": {"name": "vc-a", "generation": 3}, "spec": {"replicas": 1, "selector": {},
                       "serviceName": "vc-a", "template": {}}, "status": {"replicas": 1, "readyReplicas": 1}})
sts = k8s.ApiClient().deserialize(Answer(), "V1StatefulSet")
print(type(sts).__name__, sts.metadata.generation, sts.status.ready_replicas)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["V1StatefulSet", "3", "1"]


def test_a_process_that_imported_kubernetes_first_keeps_it() -> None:
    probe = (
        "import sys\nimport kubernetes\nimport shared.adapters.kube\n"
        "print('shared.adapters.kube.client' in (kubernetes.client.__doc__ or ''), len(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False" and int(out[1]) > 1000, out  # the real package, every model loaded
