"""``shared/`` in layers: a module imports only from its own layer or from one below it.

From the bottom: the errors; observability (logs, metrics, traces: they import nothing of ours);
the model (the Tenant and its rules: no I/O, no outside library); the settings; delivery (HTTP,
CloudEvents, sender identity, the sink); the adapters (one per outside system); the steps'
building blocks; and at the top what a process is made of (runtime) and the operator's command
(cli). Imports inside functions count as much as those at the top: a lazy import is still a
dependency. The functions (``functions/``) may use every layer; ``shared`` never imports them or
the test bed.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"

# Each layer, lowest first: a module in it may import its own layer and the ones before it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("shared.errors",),
    ("shared.observability",),
    ("shared.model",),
    ("shared.settings",),
    ("shared.delivery",),
    ("shared.adapters",),
    ("shared.steps",),
    ("shared.runtime",),
    ("shared.cli",),
)

# An outside system's client library is imported by its adapter only (a module, or a package's modules).
ONE_IMPORTER = {
    "kubernetes": "shared.adapters.kube",  # a package: its modules are the one adapter
    "pyhelm3": "shared.adapters.helm",
    "flask": "shared.delivery.http",
    "opentelemetry": "shared.observability.tracing",
    "prometheus_client": "shared.observability.metrics",
    "pythonjsonlogger": "shared.observability.logs",
    "cryptography": "shared.steps.certificates",
    "jsonschema": "shared.adapters.values_schema",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SHARED.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def rank(module: str) -> int:
    for index, layer in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in layer):
            return index
    raise LookupError(module)


def imports(path: Path) -> set[str]:
    """Every absolute module an import statement of the file names, ``from X import y`` as ``X.y``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


MODULES = {module_name(p): p for p in sorted(SHARED.rglob("*.py")) if module_name(p) != "shared"}


def violations(modules: dict[str, set[str]]) -> list[str]:
    """The imports that run against the layers, as ``importer -> imported`` lines."""
    wrong = []
    for importer, names in sorted(modules.items()):
        for name in sorted(names):
            top = name.split(".")[0]
            if top in {"functions", "testbed", "tests", "bench"}:
                wrong.append(f"{importer} -> {name} (shared imports none of these)")
            elif top == "shared" and name.count(".") >= 1:
                target = name
                while target not in MODULES and "." in target:  # `from shared.model import tenant`
                    target = target.rsplit(".", 1)[0]
                if target in MODULES and target not in LAYERS[0] and rank(target) > rank(importer):
                    wrong.append(f"{importer} -> {target} (a layer above it)")
    return wrong


def test_every_module_of_shared_is_in_a_layer() -> None:
    unplaced = []
    for module in MODULES:
        try:
            rank(module)
        except LookupError:
            unplaced.append(module)
    assert not unplaced, f"put these in a layer (LAYERS): {unplaced}"


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    assert violations({m: imports(p) for m, p in MODULES.items()}) == []


def test_the_check_finds_an_import_upwards() -> None:
    found = violations({"shared.model.tenant": {"shared.adapters.kube", "shared.errors"}, "shared.cli": {"functions"}})
    assert found == [
        "shared.cli -> functions (shared imports none of these)",
        "shared.model.tenant -> shared.adapters.kube (a layer above it)",
    ]


def test_the_model_imports_only_the_standard_library_and_itself() -> None:
    outside = {
        f"{module} -> {name}"
        for module, path in MODULES.items()
        if rank(module) == rank("shared.model")
        for name in imports(path)
        if name.split(".")[0] not in sys.stdlib_module_names and not name.startswith(("shared.model", "shared.errors"))
    }
    assert outside == set()


@pytest.mark.parametrize(("library", "adapter"), sorted(ONE_IMPORTER.items()))
def test_an_outside_client_has_one_importer(library: str, adapter: str) -> None:
    importers = {m for m, p in MODULES.items() if any(n.split(".")[0] == library for n in imports(p))}
    assert importers, f"nothing imports {library}"
    assert {m for m in importers if m != adapter and not m.startswith(adapter + ".")} == set()
