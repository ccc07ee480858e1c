"""Knative Eventing's objects in the API server, before any of its processes starts: its CRDs,
config maps (``config-features`` merge-patched with the repository's patch, then with the test
bed's own keys: :mod:`.oidc`), its own RBAC, and the Services, Endpoints and Deployments a cluster
would hold for its pods; with ``authentication-oidc`` on, what that needs (:func:`.oidc.install_prerequisites`).

All come from the module's own ``config/`` folder, copied by the toolchain, except the Endpoints:
only pods would fill them, so they are written by hand with one TEST-NET address (192.0.2.10,
never dialled: the API server refuses loopback endpoints) so the reconcilers' "endpoints
available" checks pass. The CRDs that convert versions through Knative's webhook (which does not
run here) convert by name instead, and the source CRDs lose the label that enrols them in
Knative's EventType registry (:func:`_without_event_type_registry`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed.knative import oidc
from testbed.knative.kubectl import kubectl
from testbed.knative.names import SYSTEM_NAMESPACE
from testbed.processes import ProcessError, until_conditions_exist
from testbed.toolchain import Toolchain

PLACEHOLDER_ENDPOINT = "192.0.2.10"  # TEST-NET-1: never dialled, only makes Endpoints "available"


def install_eventing(
    tools: Toolchain, kubeconfig: Path, features_patch: Path, features: Mapping[str, str] | None = None
) -> None:
    """CRDs, config maps, Knative's RBAC, and the Services/Endpoints/Deployment a cluster holds.
    ``features`` are config-features keys merged over ``features_patch`` (the test bed's own)."""

    def apply(docs: Sequence[Mapping[str, Any]], *, server_side: bool = False) -> None:
        args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
        kubectl(tools, kubeconfig, *args, input=yaml.safe_dump_all(list(docs)))

    config = tools.knative_config / "eventing"
    core, imc = config / "core", config / "channels" / "in-memory-channel"
    apply(_docs(core / "100-namespace.yaml"))
    crds = [doc for path in _files(core / "resources") for doc in _docs(path)]
    crds += _docs(imc / "resources" / "in-memory-channel.yaml")
    crds += [
        doc
        for path in _files(tools.knative_config / "serving-crds")
        for doc in _docs(path)
        if doc.get("kind") == "CustomResourceDefinition"
    ]
    apply([_without_event_type_registry(_without_conversion_webhook(crd)) for crd in crds], server_side=True)
    until_conditions_exist(
        lambda: kubectl(tools, kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    )

    configmaps = [doc for path in _files(core / "configmaps") for doc in _docs(path)]
    configmaps += _docs(imc / "configmaps" / "event-dispatcher.yaml")
    configmaps += _docs(imc / "webhooks" / "secret.yaml")  # the imc webhook's certificate Secret (unused)
    apply(configmaps)
    kubectl(
        tools,
        kubeconfig,
        "patch",
        "configmap",
        "config-features",
        "-n",
        SYSTEM_NAMESPACE,
        "--type=merge",
        f"--patch-file={features_patch}",
    )
    if features:
        patch = ["--type=merge", "-p", json.dumps({"data": dict(features)})]
        kubectl(tools, kubeconfig, "patch", "configmap", "config-features", "-n", SYSTEM_NAMESPACE, *patch)
        if features.get(oidc.FEATURE) == "enabled":
            oidc.install_prerequisites(tools, kubeconfig)

    # Knative's own identities and roles: the adapters the kubelet stand-in runs use them.
    rbac = [doc for path in _files(core, "200-*.yaml") for doc in _docs(path)]
    rbac += [doc for path in _files(core / "roles") for doc in _docs(path)]
    apply(rbac)

    services = [
        d for d in _docs(config / "brokers/mt-channel-broker/deployments/broker-ingress.yaml") if d["kind"] == "Service"
    ]
    services += [
        d for d in _docs(config / "brokers/mt-channel-broker/deployments/broker-filter.yaml") if d["kind"] == "Service"
    ]
    services += _docs(imc / "deployments" / "dispatcher-service.yaml")
    endpoints = [_placeholder_endpoints(service) for service in services]
    dispatcher = next(d for d in _docs(imc / "deployments" / "dispatcher.yaml") if d["kind"] == "Deployment")
    pingsource = next(
        d for d in _docs(core / "deployments" / "pingsource-mt-adapter.yaml") if d["kind"] == "Deployment"
    )
    apply([*services, *endpoints, dispatcher, pingsource])


def _docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _files(folder: Path, pattern: str = "*.yaml") -> list[Path]:
    found = sorted(folder.glob(pattern))
    if not found:
        raise ProcessError(f"no {pattern} in {folder}: the toolchain's copy of Knative's config/ is incomplete")
    return found


def _without_conversion_webhook(crd: dict[str, Any]) -> dict[str, Any]:
    """Knative's multi-version CRDs convert through Knative's webhook, which does not run here: the
    API server would retry the missing webhook every second for each served version. Versions are
    converted by name only (strategy None); nothing here reads a version other than the stored one."""
    if (crd.get("spec", {}).get("conversion") or {}).get("strategy") == "Webhook":
        crd = {**crd, "spec": {**crd["spec"], "conversion": {"strategy": "None"}}}
    return crd


SOURCE_DUCK_LABEL = "duck.knative.dev/source"  # knative.dev/eventing pkg/apis/sources: SourceDuckLabelKey


def _without_event_type_registry(crd: dict[str, Any]) -> dict[str, Any]:
    """A source CRD without the label that starts Knative's source-duck reconciler for it.

    That reconciler keeps one EventType per type a source sends (the EventType registry, which
    nothing of ours reads). It writes them as v1beta2, whose ``type`` and ``source`` only the
    conversion webhook carries into the stored v1beta3; converted by name they are pruned, so it
    finds them changed, deletes and re-creates them, forever: about 100 writes a second, 1.1 cores
    of an idle stack (kube-apiserver 65%, the controller 17%, etcd 15%), measured here."""
    labels = (crd.get("metadata") or {}).get("labels") or {}
    if labels.get(SOURCE_DUCK_LABEL) != "true":
        return crd
    kept = {key: value for key, value in labels.items() if key != SOURCE_DUCK_LABEL}
    return {**crd, "metadata": {**crd["metadata"], "labels": kept}}


def _placeholder_endpoints(service: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": service["metadata"]["name"], "namespace": service["metadata"]["namespace"]},
        "subsets": [
            {
                "addresses": [{"ip": PLACEHOLDER_ENDPOINT}],
                "ports": [
                    {"name": p["name"], "port": int(p["targetPort"]), "protocol": "TCP"}
                    for p in service["spec"]["ports"]
                ],
            }
        ],
    }
