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
