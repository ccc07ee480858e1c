"""Every Trigger delivers to a function that exists: its subscriber and dead-letter sink name a
Knative Service defined under deploy/, whose module functions/<module>.py exists and defines
create_app(). The local broker loads exactly the Trigger files of eventing/."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.model import lifecycle
from testbed.local.stack import routes

from .manifests import DEPLOY, EVENTING, FUNCTION_MODULES, FUNCTIONS, TRIGGERS, file_documents, objects_of


def knative_services() -> dict[str, dict[str, Any]]:
    """Every serving.knative.dev/v1 Service defined in a file under deploy/, by name."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for doc in file_documents(path):
            if doc.get("apiVersion") == "serving.knative.dev/v1" and doc.get("kind") == "Service":
                found[doc["metadata"]["name"]] = doc
    return found


def module_of(service_name: str) -> str:
    """tenant-check-ready -> check_ready (the contract's naming)."""
    assert service_name.startswith("tenant-"), f"{service_name}: function Services are named tenant-<function>"
    return service_name.removeprefix("tenant-").replace("-", "_")


def defines_create_app(module: Path) -> bool:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef) and node.name == "create_app" for node in tree.body)


def unresolved(destination: dict[str, Any], services: dict[str, dict[str, Any]], functions: Path) -> str | None:
    """Why a Trigger destination does not reach a function, or None when it does."""
    ref = destination.get("ref")
    if not isinstance(ref, dict):
        return f"not a ref to a Knative Service: {destination}"
    if (ref.get("apiVersion"), ref.get("kind")) != ("serving.knative.dev/v1", "Service"):
        return f"{ref} is not a serving.knative.dev/v1 Service"
    name = ref.get("name", "")
    if name not in services:
        return f"no Knative Service {name!r} under deploy/"
    module = functions / f"{module_of(name)}.py"
    if not module.is_file():
        return f"Service {name!r} names no function: {module} does not exist"
    if not defines_create_app(module):
        return f"{module} defines no create_app()"
    args = services[name]["spec"]["template"]["spec"]["containers"][0].get("args")
    if args != [f"functions.{module_of(name)}:create_app()"]:
        return f"Service {name!r} does not start functions.{module_of(name)}: args {args}"
    return None


def destinations(trigger: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = trigger["spec"]
    found = [("subscriber", spec["subscriber"])]
    sink = (spec.get("delivery") or {}).get("deadLetterSink")
    if sink is not None:
        found.append(("deadLetterSink", sink))
    return found


TRIGGER_FILES = sorted(TRIGGERS.glob("*.yaml"))


@pytest.mark.parametrize("path", TRIGGER_FILES, ids=lambda p: p.stem)
def test_trigger_reaches_existing_functions(path: Path) -> None:
    services = knative_services()
    for trigger in objects_of(file_documents(path), "Trigger").values():
        for field, destination in destinations(trigger):
            problem = unresolved(destination, services, FUNCTIONS)
            assert problem is None, f"{path.name} {field}: {problem}"


def test_broker_dead_letter_sink_reaches_a_function() -> None:
    (broker,) = file_documents(EVENTING / "broker.yaml")
    assert unresolved(broker["spec"]["delivery"]["deadLetterSink"], knative_services(), FUNCTIONS) is None


def test_every_function_service_is_a_module_of_the_contract() -> None:
    services = knative_services()
    assert set(services) == set(FUNCTION_MODULES)
    for name, module in FUNCTION_MODULES.items():
        assert module_of(name) == module
        assert (FUNCTIONS / f"{module}.py").is_file(), name


def test_a_trigger_naming_a_missing_function_fails(tmp_path: Path) -> None:
    """The check above can fail: a Service without its module, and a Trigger to no Service."""
    services = knative_services()
    lonely = {"ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "tenant-audit"}}
    assert "no Knative Service 'tenant-audit'" in (unresolved(lonely, services, FUNCTIONS) or "")
    services["tenant-audit"] = services["tenant-install"]
    assert "does not exist" in (unresolved(lonely, services, FUNCTIONS) or "")
    empty_functions = tmp_path / "functions"
    empty_functions.mkdir()
    (empty_functions / "install.py").write_text("def make_app():\n    pass\n")
    to_install = {"ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "tenant-install"}}
    assert "defines no create_app()" in (unresolved(to_install, services, empty_functions) or "")


def test_the_test_bed_routes_by_exactly_the_trigger_files() -> None:
    """The test bed reads each Trigger's subscriber, dead-letter sink and retries from these files."""
    docs = [yaml.safe_load(path.read_text()) for path in TRIGGER_FILES]
    broker = yaml.safe_load((EVENTING / "broker.yaml").read_text())
    found = routes([broker, *docs])
    assert sorted(r.trigger for r in found) == sorted(p.stem for p in TRIGGER_FILES)
    hints = {step.hint_trigger: step.function for step in lifecycle.STEPS if step.hint_trigger}
    assert {r.trigger: r.subscriber for r in found} == {p.stem: hints.get(p.stem, p.stem) for p in TRIGGER_FILES}
    check_ready = next(r for r in found if r.trigger == "tenant-check-ready")
    assert (check_ready.dead_letter, check_ready.retries) == ("tenant-dead-letter", 44)
