"""The small pieces every release assembler of the cluster tier shares: :class:`Manifests` (CRDs
apart from the rest), reading a release's YAML files, resolving ``ko://`` references to the local
images (:data:`testbed.images.catalog.KO_IMAGES`), and :class:`ReleaseError` for anything that is
not what an assembler expects (a missing file, a ``ko://`` reference nothing is built for).

Objects are plain dicts as ``yaml.safe_load`` gives them; nothing here touches a cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.images.catalog import KO_IMAGES

Obj = dict[str, Any]
KO_PREFIX = "ko://"


class ReleaseError(RuntimeError):
    """A release's configuration is not what the cluster tier's assembler expects."""


@dataclass(frozen=True)
class Manifests:
    """What one part of the cluster tier applies, in apply order: its CustomResourceDefinitions
    first (``crds``: apply them, wait until they are Established), then everything else
    (``objects``), some of which are instances of those CRDs, so one apply of both together fails
    with "no matches for kind" (Knative Serving's Certificate and Image, observed)."""

    crds: tuple[Obj, ...]
    objects: tuple[Obj, ...]

    @classmethod
    def together(cls, *parts: Manifests) -> Manifests:
        """Several parts as one install: every CRD first, then every object, each in its order."""
        return cls(
            crds=tuple(doc for part in parts for doc in part.crds),
            objects=tuple(doc for part in parts for doc in part.objects),
        )

    def all(self) -> list[Obj]:
        """CRDs then objects, as one list."""
        return [*self.crds, *self.objects]


def split_crds(docs: Iterable[Obj]) -> Manifests:
    """``docs`` as :class:`Manifests`, each group in the order given."""
    docs = list(docs)
    return Manifests(
        crds=tuple(d for d in docs if is_crd(d)),
        objects=tuple(d for d in docs if not is_crd(d)),
    )


# Kinds in the order a release is best applied in (what Helm does too): an identity before the
# pods that use it, config before the pods that read it, webhook configurations last. Kinds not
# named come after the Services.
_KIND_ORDER = (
    ("Namespace",),
    ("ServiceAccount",),
    ("ClusterRole", "Role"),
    ("ClusterRoleBinding", "RoleBinding"),
    ("ConfigMap", "Secret"),
    ("Service",),
    (),
    ("Deployment", "StatefulSet", "DaemonSet"),
    ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"),
)
_KIND_RANK = {kind: rank for rank, kinds in enumerate(_KIND_ORDER) for kind in kinds}
_OTHER_RANK = _KIND_ORDER.index(())


def in_apply_order(docs: Iterable[Obj]) -> list[Obj]:
    """``docs`` sorted by kind (:data:`_KIND_ORDER`), stable within a kind: a release's files
    hold a Deployment before the ServiceAccount it runs as (Eventing's broker), and a pod made
    before its ServiceAccount exists is refused and retried later."""
    return sorted(docs, key=lambda doc: _KIND_RANK.get(str(doc.get("kind")), _OTHER_RANK))


def is_crd(doc: Mapping[str, Any]) -> bool:
    return doc.get("kind") == "CustomResourceDefinition"


def load(path: Path) -> list[Obj]:
    """The non-empty YAML documents of one file; :class:`ReleaseError` if it is missing."""
    if not path.is_file():
        raise ReleaseError(f"{path} is missing: the toolchain's copy of the release configuration is incomplete")
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def yaml_files(folder: Path) -> list[Path]:
    """The ``*.yaml`` files directly in ``folder``, sorted (the order ``ko resolve -f`` reads them);
    :class:`ReleaseError` if there are none. Other files (``placeholder.go``, editor leftovers such
    as ``x.yaml~abc``) are not configuration."""
    found = sorted(folder.glob("*.yaml"))
    if not found:
        raise ReleaseError(f"no *.yaml in {folder}: the toolchain's copy of the release configuration is incomplete")
    return found


def key(doc: Mapping[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name): what identifies an object within one release."""
    meta = doc.get("metadata") or {}
    return str(doc.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name"))


def find(docs: Iterable[Obj], kind: str, name: str) -> Obj:
    """The one object of that kind and name; :class:`ReleaseError` if there is none."""
    for doc in docs:
        if doc.get("kind") == kind and doc["metadata"]["name"] == name:
            return doc
    raise ReleaseError(f"no {kind} {name} in the release configuration")


def resolve_ko(doc: Obj, images: Mapping[str, str] = KO_IMAGES) -> Obj:
    """A copy of ``doc`` with every string that is a ``ko://`` reference replaced by its image;
    :class:`ReleaseError` naming the object if one is not in ``images`` (nothing is built for it)
    or if ``ko://`` is left anywhere else (inside a longer string)."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and value.startswith(KO_PREFIX):
            if value not in images:
                kind, namespace, name = key(doc)
                raise ReleaseError(f"{kind} {namespace}/{name}: no local image is built for {value}")
            return images[value]
        return value

    resolved: Obj = walk(doc)
    left = [s for s in strings(resolved) if KO_PREFIX in s]
    if left:
        kind, namespace, name = key(doc)
        raise ReleaseError(f"{kind} {namespace}/{name}: ko:// reference left in {left[0]!r}")
    return resolved


def strings(value: Any) -> Iterable[str]:
    """Every string in a nested structure of dicts and lists (values, not keys)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, str):
        yield value


def pod_images(doc: Mapping[str, Any]) -> list[str]:
    """The images of every container and init container of a workload (Deployment, StatefulSet,
    Knative Service) or a Knative ``Image`` (its ``spec.image``)."""
    if doc.get("kind") == "Image":
        return [str(doc["spec"]["image"])]
    spec = doc.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    return [str(c["image"]) for field in ("initContainers", "containers") for c in pod.get(field) or []]


def merged_data(configmap: Obj, data: Mapping[str, str]) -> Obj:
    """A copy of a ConfigMap with ``data`` merged into its data (a merge patch's effect)."""
    merged = copy.deepcopy(configmap)
    merged["data"] = {**(merged.get("data") or {}), **data}
    return merged
