"""The Kubernetes client, loaded a part at a time: the one place this adapter imports ``kubernetes``.

``import kubernetes`` runs the package's ``__init__``, which imports every API class and every
model the client has (840 names, 767 model modules): 0.5-0.8 s and 28 MiB of a worker's resident
memory, for the 10 API classes and the few models this adapter uses (issue 29: cold start and
worker memory; ``bench coldstart`` and ``bench burst`` measure them). Before that import, ``load``
puts in ``sys.modules`` a lazy stand-in for each of the packages ``kubernetes``,
``kubernetes.client``, ``kubernetes.client.api`` and ``kubernetes.client.models``: a module whose
``__path__`` is the real package's folder, so its submodules import as usual, and whose
``__getattr__`` (PEP 562) imports a name's submodule the first time the name is asked for. Which
submodule holds a name is read from the real package's own ``__init__.py`` (each of its lines is
``from kubernetes.client.<module> import <Name>``), never guessed. The client's deserializer
(``getattr(kubernetes.client.models, klass)``) and ``kubernetes.config`` (``from
kubernetes.client import ApiClient, Configuration``) go through the same ``__getattr__``.

A process that has already imported ``kubernetes`` (a test, a tool) keeps it: ``load`` changes
nothing then. ``tests/unit/test_lazy_imports.py`` checks both that a function loads a handful of
models and that every name of the real ``__init__`` files resolves through the stand-ins.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

# The form of every line of the client's generated __init__ files that names something.
_NAMED = re.compile(r"^from (kubernetes\.client[\w.]*) import (\w+)\s*$", re.MULTILINE)
_VERSION = re.compile(r"^__version__ = \"([^\"]+)\"\s*$", re.MULTILINE)
LAZY = ("kubernetes", "kubernetes.client", "kubernetes.client.api", "kubernetes.client.models")


def names_in(init: Path) -> dict[str, str]:
    """What a generated ``__init__.py`` imports: each name, and the module it comes from."""
    return _names(init.read_text())


def _names(source: str) -> dict[str, str]:
    return {name: module for module, name in _NAMED.findall(source)}


def lazy_package(fullname: str, folder: Path) -> types.ModuleType:
    """A package module for ``folder`` whose ``__init__`` is not run: the names that ``__init__``
    imports (``names_in``) and its submodules are imported on first use; its ``__version__`` is
    the real one's."""
    init = folder / "__init__.py"
    source = init.read_text()
    names = _names(source)
    package = types.ModuleType(fullname, f"{fullname}, loaded a name at a time (shared.adapters.kube.client)")
    package.__path__ = [str(folder)]
    package.__package__ = fullname
    package.__file__ = str(init)
    # a spec as the import system would give the real package (importlib.util.find_spec reads it)
    package.__spec__ = importlib.machinery.ModuleSpec(fullname, None, origin=str(init), is_package=True)
    package.__spec__.submodule_search_locations = [str(folder)]
    if version := _VERSION.search(source):
        package.__version__ = version.group(1)  # type: ignore[attr-defined]

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
        else:
            try:
                value = importlib.import_module(f"{fullname}.{name}")
            except ModuleNotFoundError:
                raise AttributeError(f"module {fullname!r} has no attribute {name!r}") from None
        setattr(package, name, value)
        return value

    package.__getattr__ = __getattr__  # type: ignore[method-assign]
    return package


def load() -> None:
    """Put the lazy packages in place, unless ``kubernetes`` is imported already."""
    if "kubernetes" in sys.modules:
        return
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or spec.origin is None:  # not installed: the import below says so
        return
    root = Path(spec.origin).parent
    # the top package's own __init__ names nothing of the client's form: it gets submodules only
    sys.modules.update({name: lazy_package(name, root.joinpath(*name.split(".")[1:])) for name in LAZY})


load()

from kubernetes import client as k8s  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402
from kubernetes.watch.watch import iter_resp_lines  # noqa: E402

__all__ = ["ApiException", "iter_resp_lines", "k8s", "k8s_config", "load", "names_in"]
