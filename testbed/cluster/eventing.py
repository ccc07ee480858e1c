"""Knative Eventing as its release (``eventing.yaml`` = eventing-core + mt-channel-broker +
in-memory-channel) installs it, as pods: :func:`eventing_manifests`, from the toolchain's copy of
knative.dev/eventing's ``config/`` (``Toolchain.knative_config / "eventing"``).

The release is ``ko resolve`` of three folders, taken here the same way (every ``*.yaml`` below
them, in path order): ``core/`` (CRDs, RBAC, config maps, the controller, the webhook, the
PingSource adapter and the webhook configurations), ``channels/in-memory-channel/`` (its CRD,
RBAC, config map, controller with its own webhook, dispatcher) and ``brokers/mt-channel-broker/``
(RBAC, controller, broker ingress and filter). Every ``ko://`` reference becomes the local image
(:data:`testbed.images.catalog.KO_IMAGES`), including the controller's ``APISERVER_RA_IMAGE`` (the
ApiServerSource adapter) and the in-memory channel controller's ``DISPATCHER_IMAGE``; one nothing
is built for fails, so a new upstream component needs a decision here.

Left out, because no image is built for them and the project uses none of them:

- the JobSink receiver (``core/deployments/job-sink.yaml``, its ServiceAccount, ClusterRole and
  binding) and RequestReply (``core/deployments/request-reply.yaml``: StatefulSet, Service,
  Secret; its ServiceAccount, ClusterRole and binding). Their CRDs stay (the controller watches
  them; no object of theirs is ever made);
- the HorizontalPodAutoscalers and the webhook's PodDisruptionBudget: one node, one replica each;
- not part of ``eventing.yaml`` anyway: ``core-tls/`` and the ``*-tls/`` Certificates
  (cert-manager), ``post-install/`` (the storage version migration Job), ``tools/``, ``monitoring/``.

Stand-ins, because the module zip lacks what the release has:

- the controller reads two ConfigMaps, ``eventing-integrations-images`` and
  ``eventing-transformations-images`` (env ``configMapKeyRef``, not optional: without them its pod
  never starts). In the repository they are symbolic links to ``third_party/``, which a module
  zip leaves out; they name the images of IntegrationSource/IntegrationSink/EventTransform, which
  are not built here. They are written with every key the controller reads, each naming an image
  that does not exist (``kubeopera.local/not-built/<key>:none``), so such an object would fail to
  pull, loudly;
- the controller's ``AUTH_PROXY_IMAGE`` (``ko://knative.dev/eventing/cmd/auth_proxy``, the
  IntegrationSink's OIDC proxy; required non-empty) names such an image too.

``features`` is merged into ``config-features`` (the project's ``eventing/config-features-patch.yaml``,
:func:`testbed.cluster.overlay.project_eventing_features`). Nothing else changes: the upstream
securityContexts and resource requests stay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from testbed.cluster.yamldocs import (
    Manifests,
    Obj,
    ReleaseError,
    find,
    in_apply_order,
    load,
    merged_data,
    resolve_ko,
    split_crds,
)
from testbed.images.catalog import KO_IMAGES, REGISTRY

SYSTEM_NAMESPACE = "knative-eventing"
COMPONENTS = ("core", "channels/in-memory-channel", "brokers/mt-channel-broker")
LEFT_OUT_FILES = frozenset(
    {
        "core/200-job-sink-serviceaccount.yaml",
        "core/roles/job-sink-clusterrole.yaml",
        "core/deployments/job-sink.yaml",
        "core/200-request-reply-serviceaccount.yaml",
        "core/roles/request-reply-clusterrole.yaml",
        "core/deployments/request-reply.yaml",
    }
)
LEFT_OUT_KINDS = frozenset({"HorizontalPodAutoscaler", "PodDisruptionBudget"})
CONTROLLER = "eventing-controller"
AUTH_PROXY = "ko://knative.dev/eventing/cmd/auth_proxy"


def not_built(name: str) -> str:
    """An image reference that names what is not built here (and never pulls)."""
    return f"{REGISTRY}/not-built/{name}:none"


def eventing_manifests(config_dir: Path, features: Mapping[str, str]) -> Manifests:
    """Knative Eventing (core, in-memory channel, MT channel-based broker) as pods: its CRDs, then
    the namespace, RBAC, config maps (``features`` merged into ``config-features``), the
    Deployments and Services, the webhook configurations and their Secrets; what is left out or
    stood in for is in the module docstring."""
    docs: list[Obj] = []
    for component in COMPONENTS:
        for path in _tree(config_dir, component):
            for doc in load(path):
                if doc["kind"] in LEFT_OUT_KINDS:
                    continue
                docs.append(_resolved(doc))
    docs = [_configured(doc, features) for doc in docs]
    docs += _image_configmaps(find(docs, "Deployment", CONTROLLER), docs)
    return split_crds(in_apply_order(docs))


def _tree(config_dir: Path, component: str) -> list[Path]:
    folder = config_dir / component
    files = sorted(p for p in folder.rglob("*.yaml") if p.relative_to(config_dir).as_posix() not in LEFT_OUT_FILES)
    if not files:
        raise ReleaseError(f"no *.yaml under {folder}: the toolchain's copy of Eventing's config/ is incomplete")
    return files


def _resolved(doc: Obj) -> Obj:
    if doc["kind"] == "Deployment" and doc["metadata"]["name"] == CONTROLLER:
        return resolve_ko(doc, {**KO_IMAGES, AUTH_PROXY: not_built("auth-proxy")})
    return resolve_ko(doc)


def _configured(doc: Obj, features: Mapping[str, str]) -> Obj:
    if (doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace")) == (
        "ConfigMap",
        "config-features",
        SYSTEM_NAMESPACE,
    ):
        return merged_data(doc, features)
    return doc


def _image_configmaps(controller: Obj, docs: Iterable[Obj]) -> list[Obj]:
    """The ConfigMaps the controller's env refers to that the release configuration lacks, with
    every key it reads naming an image that is not built."""
    present = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    wanted: dict[str, list[str]] = {}
    for container in controller["spec"]["template"]["spec"]["containers"]:
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
            if ref and ref["name"] not in present:
                wanted.setdefault(ref["name"], []).append(ref["key"])
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": SYSTEM_NAMESPACE,
                "labels": {"app.kubernetes.io/name": "knative-eventing"},
            },
            "data": {key: not_built(key) for key in sorted(keys)},
        }
        for name, keys in sorted(wanted.items())
    ]
