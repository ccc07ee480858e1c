"""Knative Serving's core as its release (``serving-core.yaml``) holds it, assembled from the
toolchain's copies of the modules (``ClusterToolchain.knative_serving_config``): :func:`serving_manifests`.

Serving's release is ``ko resolve -R -f config/core/``, and ``config/core`` pulls in, through
symbolic links that a Go module zip leaves out, four CRDs and ``config-network`` from
knative.dev/networking's ``config/`` and the ``Image`` CRD from knative.dev/caching's ``config/``.
So the folder given holds three copies: ``serving/`` (= serving's ``config/core``), ``networking/``
and ``caching/`` (= their ``config/``), and the files are taken as the prototype did
(``shared/real-node/serving/assemble.py``, observed working).

Changes to the release, all of them:

- every ``ko://`` reference becomes the local image (:data:`testbed.images.catalog.KO_IMAGES`):
  the four Deployments, ``config-deployment``'s ``queue-sidecar-image`` and the queue-proxy
  ``Image``; a reference no image is built for fails;
- ``config-deployment``: ``kubeopera.local`` joins ``registries-skipping-tag-resolving``, so the
  controller does not try to resolve tags to digests against a registry;
- ``config-network``: ``ingress-class: traefik.ingress.networking.knative.dev`` (Traefik's own
  Knative provider is the KIngress implementation, :func:`testbed.cluster.addons.traefik_manifests`);
- ``config-autoscaler``: the caller's settings merged in (the tests shorten ``stable-window`` and
  ``scale-to-zero-grace-period``);
- left out: the HorizontalPodAutoscalers and PodDisruptionBudgets (``deployments/*-hpa.yaml``):
  one node, one replica each.

Nothing else: the upstream securityContexts (non-root, read-only root filesystem, all
capabilities dropped, RuntimeDefault seccomp) and resource requests stay.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from testbed.cluster.yamldocs import (
    Manifests,
    Obj,
    ReleaseError,
    in_apply_order,
    load,
    merged_data,
    resolve_ko,
    split_crds,
    yaml_files,
)
from testbed.images.catalog import REGISTRY

SYSTEM_NAMESPACE = "knative-serving"
INGRESS_CLASS = "traefik.ingress.networking.knative.dev"
LEFT_OUT_KINDS = frozenset({"HorizontalPodAutoscaler", "PodDisruptionBudget"})

# What serving's config/core links to in the other two modules (the links a module zip drops).
NETWORKING_CRDS = ("certificate.yaml", "ingress.yaml", "serverlessservice.yaml", "domain-claim.yaml")
NETWORKING_CONFIG = "config-network.yaml"
CACHING_CRDS = ("image.yaml",)

# Knative's webhook refuses a stable-window outside [6s; 1h] (pkg/apis/autoscaling WindowMin/Max).
STABLE_WINDOW_RANGE = (6.0, 3600.0)


def serving_manifests(config_dir: Path, autoscaler: Mapping[str, str]) -> Manifests:
    """Knative Serving core: its CRDs (serving's, networking's four and caching's ``Image``), then
    the namespace, RBAC, the ``routing-serving-certs`` KnativeCertificate, the config maps, the
    controller, webhook, activator and autoscaler (Deployments and Services), the webhook
    configurations and their Secret, and the queue-proxy ``Image``; changed as the module
    docstring lists. ``autoscaler`` is merged into ``config-autoscaler`` (``ValueError`` for a
    ``stable-window`` Knative's webhook would refuse)."""
    _check_autoscaler(autoscaler)
    serving, networking, caching = (config_dir / part for part in ("serving", "networking", "caching"))
    files = [
        serving / "100-namespace.yaml",
        *yaml_files(serving / "200-roles"),
        serving / "200-serviceaccount.yaml",
        *(caching / name for name in CACHING_CRDS),
        *(networking / name for name in NETWORKING_CRDS),
        *yaml_files(serving / "300-resources"),
        serving / "300-knativecertificate.yaml",
        networking / NETWORKING_CONFIG,
        *yaml_files(serving / "configmaps"),
        *yaml_files(serving / "deployments"),
        *yaml_files(serving / "webhooks"),
        serving / "999-cache.yaml",
    ]
    docs = [resolve_ko(doc) for path in files for doc in load(path) if doc["kind"] not in LEFT_OUT_KINDS]
    return split_crds(in_apply_order(_configured(doc, autoscaler) for doc in docs))


def _configured(doc: Obj, autoscaler: Mapping[str, str]) -> Obj:
    if doc["kind"] != "ConfigMap" or doc["metadata"].get("namespace") != SYSTEM_NAMESPACE:
        return doc
    name = doc["metadata"]["name"]
    if name == "config-deployment":
        return merged_data(doc, {"registries-skipping-tag-resolving": _skipping_tag_resolving(doc)})
    if name == "config-network":
        return merged_data(doc, {"ingress-class": INGRESS_CLASS})
    if name == "config-autoscaler":
        return merged_data(doc, autoscaler)
    return doc


def _skipping_tag_resolving(config_deployment: Obj) -> str:
    """Knative's list (the ConfigMap's value, else the default its ``_example`` documents) plus
    the local registry."""
    data = config_deployment.get("data") or {}
    current = data.get("registries-skipping-tag-resolving")
    if current is None:
        example = yaml.safe_load(data.get("_example") or "") or {}
        current = example.get("registries-skipping-tag-resolving") if isinstance(example, dict) else None
    if current is None:
        raise ReleaseError("config-deployment documents no registries-skipping-tag-resolving default")
    registries = [r.strip() for r in str(current).split(",") if r.strip()]
    return ",".join(registries if REGISTRY in registries else [*registries, REGISTRY])


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_duration_seconds(text: str) -> float:
    """Seconds of a Go duration such as ``20s``, ``1m30s`` or ``500ms``; ``ValueError`` otherwise."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a Go duration (e.g. 20s, 1m30s)")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def _check_autoscaler(autoscaler: Mapping[str, str]) -> None:
    window = autoscaler.get("stable-window")
    if window is None:
        return
    low, high = STABLE_WINDOW_RANGE
    if not low <= _go_duration_seconds(window) <= high:
        raise ValueError(f"config-autoscaler stable-window {window}: Knative's webhook refuses it (not in [6s; 1h])")
