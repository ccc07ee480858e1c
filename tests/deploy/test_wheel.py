"""The runtime wheel (what the image installs) holds the runtime and nothing else.

Built as the Dockerfile's ``wheel`` stage builds it (tests/deploy/wheel.py). Its files are exactly
the Python modules of ``shared/`` and ``functions/``: no test bed, no chart, no stand-ins. Its
dependencies are exactly what those modules import (gunicorn, the server the image runs, aside),
so nothing the test bed alone needs (``pytest``) reaches the image. ``PyYAML`` and ``cryptography``
are the runtime's own since check-ready reads the kubeconfig vcluster exports
(shared/adapters/vcluster_api.py) and resync its certificate's expiry (shared/steps/certificates.py). Its only
command is the operator's ``kubeopera-tenants`` (``status``,
``retry``); ``local`` comes from the test bed's own distribution.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

from .manifests import DOCKERFILE, REPO
from .wheel import wheel_stage_sources

RUNTIME = ("shared", "functions")
# The server the image runs (Dockerfile ENTRYPOINT); no module imports it.
SERVER = "gunicorn"


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if re.fullmatch(rf"kubeopera_tenants-[^/]+\.dist-info/{name}", n)]
    return wheel.read(path).decode()


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _third_party_imports() -> set[str]:
    """Dotted names of what the runtime's modules import from outside the standard library and
    the runtime itself (``from a import b`` counts as ``a.b`` when that is a module)."""
    found: set[str] = set()
    for package in RUNTIME:
        for module in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.update(_submodule_or_module(node.module, alias.name) for alias in node.names)
    return {name for name in found if name.split(".")[0] not in (*sys.stdlib_module_names, *RUNTIME, "__future__")}


def _submodule_or_module(module: str, name: str) -> str:
    try:
        return f"{module}.{name}" if importlib.util.find_spec(f"{module}.{name}") else module
    except ModuleNotFoundError:
        return module


def _distribution_of(module: str) -> str:
    """The installed distribution whose files hold ``module`` (namespace packages such as
    ``opentelemetry`` are shared by several)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    origin = Path(spec.origin).resolve()
    for name in packages_distributions()[module.split(".")[0]]:
        files = distribution(name).files or []
        if any(Path(str(distribution(name).locate_file(f))).resolve() == origin for f in files):
            return _canonical(name)
    raise AssertionError(f"no installed distribution holds {module} ({origin})")


def test_the_dockerfile_builds_the_wheel_from_the_runtime_only() -> None:
    assert wheel_stage_sources(DOCKERFILE.read_text(encoding="utf-8")) == [
        "pyproject.toml",
        "README.md",
        *RUNTIME,
    ]


def test_the_wheel_holds_the_runtime_modules_and_nothing_else(runtime_wheel: Path) -> None:
    with zipfile.ZipFile(runtime_wheel) as wheel:
        names = wheel.namelist()
    payload = sorted(n for n in names if not n.split("/")[0].endswith(".dist-info"))
    expected = sorted(str(path.relative_to(REPO)) for package in RUNTIME for path in (REPO / package).rglob("*.py"))
    assert payload == expected
    assert not [n for n in names if "testbed" in n or "chart" in n or "standin" in n]


def test_the_wheel_depends_on_what_the_runtime_imports_and_nothing_else(runtime_wheel: Path) -> None:
    with zipfile.ZipFile(runtime_wheel) as wheel:
        metadata = Parser().parsestr(_dist_info(wheel, "METADATA"))
    required = {
        _canonical(re.split(r"[\s<>=!~;\[(]", line, maxsplit=1)[0])
        for line in metadata.get_all("Requires-Dist") or []
        if "extra ==" not in line
    }
    imported = {_distribution_of(name) for name in _third_party_imports()}
    assert required == imported | {SERVER}
    assert "pytest" not in required


def test_the_wheels_only_command_is_the_operators(runtime_wheel: Path) -> None:
    with zipfile.ZipFile(runtime_wheel) as wheel:
        entry_points = _dist_info(wheel, "entry_points.txt")
    sections = re.findall(r"^\[(.+)\]$", entry_points, re.M)
    assert sections == ["console_scripts"]
    assert re.findall(r"^(\S+) = (\S+)$", entry_points, re.M) == [("kubeopera-tenants", "shared.cli:main")]
