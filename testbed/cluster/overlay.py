"""The project as the cluster tier applies it: ``deploy/crd/tenants.yaml`` and ``deploy/base`` (which
includes ``eventing/``) as ``kubectl kustomize`` builds it, with only the changes the test bed
cannot do without (:func:`project_manifests`), and the Eventing feature flags the project needs
(:func:`project_eventing_features`).

The changes, all of them (anything else of ``deploy/`` reaches the cluster as kustomize built it):

(a) image: every ``ghcr.io/kubeopera/kubeopera-tenants:<tag>`` becomes
    :data:`testbed.images.catalog.FUNCTION_IMAGE`, the same wheel in the Dockerfile's layout, built
    on this machine (stand-in: no registry holds the published image here);
(b) ``tenant-functions-config``: ``VCLUSTER_CHART`` is the test bed's OCI registry holding the
    stand-in chart (stand-in for loft-sh's chart on ghcr.io; same name and version);
(c) a Service ``kubeopera-api`` (port 8080, no selector) and its EndpointSlice, pointing at the
    kubeopera-api stand-in on the host (stand-in: in production kubeopera-api is another team's
    Service in this namespace, which ``deploy/`` does not define and ``KUBEOPERA_API_BASE_URL``
    names as ``http://kubeopera-api:8080``);
(d) with a registry CA: a ConfigMap ``testbed-registry-ca`` holding it, mounted into the
    Knative Services that run helm (:data:`HELM_MODULES`), with ``SSL_CERT_FILE`` pointing at it
    (local necessity: helm talks plain HTTP only to localhost, so the registry serves HTTPS with a
    certificate of the test bed's CA, and Go's crypto/x509, hence helm, reads ``SSL_CERT_FILE``);
(e) optionally, for tests: ``autoscaling.knative.dev/*`` annotations merged into every function's
    revision template (e.g. a shorter ``window`` or a ``min-scale``);
(f) optionally, for tests: more settings merged into ``tenant-functions-config`` (e.g. a shorter
    ``READY_POLL_SECONDS``), never ``VCLUSTER_CHART`` (that is (b)).
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster.yamldocs import Manifests, Obj, ReleaseError, find, load, merged_data
from testbed.images.catalog import FUNCTION_IMAGE
from testbed.processes import run
from testbed.project import TENANT_NAMESPACE, function_modules

KNATIVE_SERVICE = "serving.knative.dev/v1"
PUBLISHED_IMAGE = "ghcr.io/kubeopera/kubeopera-tenants"
FUNCTIONS_CONFIG = "tenant-functions-config"
API_SERVICE = "kubeopera-api"
API_PORT = 8080  # KUBEOPERA_API_BASE_URL in deploy/base/config.yaml
REGISTRY_CA = "testbed-registry-ca"
REGISTRY_CA_KEY = "ca.crt"
REGISTRY_CA_DIR = "/etc/kubeopera-testbed/registry-ca"
REGISTRY_CA_FILE = f"{REGISTRY_CA_DIR}/{REGISTRY_CA_KEY}"
# The functions whose create_app asks the runtime for a helm client (shared.runtime.helm_client):
# install (install/upgrade: pulls the chart) and cleanup (uninstall). check-ready reads helm's
# release record from the API (shared.adapters.release).
HELM_MODULES = frozenset({"install", "cleanup"})
AUTOSCALING_PREFIX = "autoscaling.knative.dev/"
_ADDED = frozenset({("Service", API_SERVICE), ("EndpointSlice", API_SERVICE), ("ConfigMap", REGISTRY_CA)})
TESTBED_LABELS = {"app.kubernetes.io/part-of": "kubeopera-testbed"}


def project_eventing_features(project_root: Path) -> dict[str, str]:
    """The ``data`` of ``eventing/config-features-patch.yaml``: what the project sets in Knative
    Eventing's ``config-features`` (``delivery-retryafter: enabled``)."""
    path = project_root / "eventing" / "config-features-patch.yaml"
    (patch,) = load(path)
    if (patch.get("kind"), patch["metadata"].get("name")) != ("ConfigMap", "config-features"):
        raise ReleaseError(f"{path} is not a patch of ConfigMap config-features")
    return {str(k): str(v) for k, v in (patch.get("data") or {}).items()}


def kustomize(kubectl: Path, folder: Path) -> list[Obj]:
    """``kubectl kustomize <folder>``, as objects."""
    built = run([kubectl, "kustomize", folder]).stdout
    return [doc for doc in yaml.safe_load_all(built) if doc]


def project_manifests(
    project_root: Path,
    kubectl: Path,
    *,
    chart_ref: str,
    api_address: tuple[str, int],
    registry_ca_pem: bytes | None,
    autoscaling: Mapping[str, str] | None = None,
    function_config: Mapping[str, str] | None = None,
) -> Manifests:
    """The Tenant CRD (``crds``), then ``deploy/base`` as kustomize builds it with the changes (a)
    to (f) of the module docstring (``objects``; what is added comes right after the namespace).
    ``api_address`` is where the kubeopera-api stand-in listens (an IP the pods reach, and a
    port); ``registry_ca_pem`` the CA of the registry ``chart_ref`` is on, if it is not one the
    image trusts; ``autoscaling`` annotations must start with ``autoscaling.knative.dev/``;
    ``function_config`` is merged into ``tenant-functions-config``."""
    annotations = dict(autoscaling or {})
    foreign = sorted(k for k in annotations if not k.startswith(AUTOSCALING_PREFIX))
    if foreign:
        raise ValueError(f"only {AUTOSCALING_PREFIX}* annotations may be overridden, not {', '.join(foreign)}")

    settings = {**(function_config or {}), "VCLUSTER_CHART": chart_ref}
    if function_config and "VCLUSTER_CHART" in function_config:
        raise ValueError("VCLUSTER_CHART is chart_ref, not a function_config setting")

    crds = load(project_root / "deploy" / "crd" / "tenants.yaml")
    if any(doc["kind"] != "CustomResourceDefinition" for doc in crds):
        raise ReleaseError("deploy/crd/tenants.yaml holds more than CRDs")
    built = kustomize(kubectl, project_root / "deploy" / "base")
    find(built, "Namespace", TENANT_NAMESPACE)
    for doc in built:
        name = doc["metadata"]["name"]
        if (doc["kind"], name) in _ADDED:
            raise ReleaseError(f"deploy/ defines {doc['kind']} {name}: the test bed's would replace it")
    modules = function_modules(built)
    helm_services = {name for name, module in modules.items() if module in HELM_MODULES}
    if len(helm_services) != len(HELM_MODULES):
        raise ReleaseError(f"deploy/base runs {sorted(helm_services)}, not one Service per module of {HELM_MODULES}")
    with_ca = registry_ca_pem is not None

    objects: list[Obj] = []
    for doc in built:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == FUNCTIONS_CONFIG:
            doc = merged_data(doc, settings)
        elif (doc["apiVersion"], doc["kind"]) == (KNATIVE_SERVICE, "Service") and doc["metadata"]["name"] in modules:
            doc = _function_service(doc, annotations, with_ca and doc["metadata"]["name"] in helm_services)
        objects.append(doc)
        if doc["kind"] == "Namespace" and doc["metadata"]["name"] == TENANT_NAMESPACE:
            objects += _api_standin(api_address)
            if registry_ca_pem is not None:
                objects.append(_registry_ca(registry_ca_pem))
    return Manifests(crds=tuple(crds), objects=tuple(objects))


def _function_service(service: Obj, annotations: Mapping[str, str], mount_ca: bool) -> Obj:
    """A function's Knative Service with the local image (a), the tests' annotations (e) and, for
    one that runs helm, the registry's CA (d)."""
    service = copy.deepcopy(service)
    template = service["spec"]["template"]
    if annotations:
        template.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
    pod = template["spec"]
    for container in pod["containers"]:
        if str(container.get("image", "")).startswith(f"{PUBLISHED_IMAGE}:"):
            container["image"] = FUNCTION_IMAGE
        if mount_ca:
            container.setdefault("volumeMounts", []).append(
                {"name": REGISTRY_CA, "mountPath": REGISTRY_CA_DIR, "readOnly": True}
            )
            container.setdefault("env", []).append({"name": "SSL_CERT_FILE", "value": REGISTRY_CA_FILE})
    if mount_ca:
        pod.setdefault("volumes", []).append({"name": REGISTRY_CA, "configMap": {"name": REGISTRY_CA}})
    return service


def _api_standin(api_address: tuple[str, int]) -> list[Obj]:
    """Service ``kubeopera-api`` (no selector) and the EndpointSlice that points it at the host."""
    host, port = api_address
    address = ipaddress.ip_address(host)  # ValueError for a name: an EndpointSlice holds addresses
    meta: dict[str, Any] = {"namespace": TENANT_NAMESPACE, "labels": dict(TESTBED_LABELS)}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": API_SERVICE, **meta},
            "spec": {"ports": [{"name": "http", "port": API_PORT, "targetPort": port, "protocol": "TCP"}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": API_SERVICE,
                **meta,
                "labels": {
                    **TESTBED_LABELS,
                    "kubernetes.io/service-name": API_SERVICE,
                    # not the EndpointSlice controller's: it leaves a slice it does not manage alone
                    "endpointslice.kubernetes.io/managed-by": "testbed.kubeopera.local",
                },
            },
            "addressType": "IPv4" if address.version == 4 else "IPv6",
            "endpoints": [{"addresses": [str(address)], "conditions": {"ready": True}}],
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        },
    ]


def _registry_ca(pem: bytes) -> Obj:
    text = pem.decode("ascii")
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError("registry_ca_pem holds no PEM certificate")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": REGISTRY_CA, "namespace": TENANT_NAMESPACE, "labels": dict(TESTBED_LABELS)},
        "data": {REGISTRY_CA_KEY: text},
    }
