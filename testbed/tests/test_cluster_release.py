"""The cluster tier's release assembly (``testbed.cluster.release``): what it applies, checked
without a cluster.

- CoreDNS and Traefik: names, addresses, images, selectors, Traefik's RBAC;
- Knative Serving and Eventing, from the toolchain's copies of their release configurations:
  no ``ko://`` left, every image local, CRDs apart, the documented changes and nothing else
  (upstream securityContexts and resources kept), nothing a pod needs missing;
- the project: ``deploy/`` as plain kustomize builds it, object for object, but for the
  documented changes (a)-(f).

Tests that read the toolchain's copies (and run its kubectl) are marked ``integration``, as
``tests/deploy`` marks what needs a built tool.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import toolchain
from testbed.cluster import release
from testbed.cluster.eventing import LEFT_OUT_FILES
from testbed.cluster.overlay import (
    API_SERVICE,
    HELM_MODULES,
    REGISTRY_CA,
    REGISTRY_CA_FILE,
    kustomize,
)
from testbed.cluster.serving import INGRESS_CLASS
from testbed.cluster.yamldocs import ReleaseError, key, load, pod_images, resolve_ko, strings
from testbed.images.catalog import COREDNS, FUNCTION_IMAGE, KO_IMAGES, REGISTRY, TRAEFIK
from testbed.project import function_modules

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "kubeopera-system"
AUTOSCALER = {"stable-window": "20s", "scale-to-zero-grace-period": "10s"}
CHART_REF = "oci://10.99.91.1:5443/charts/vcluster"
API_ADDRESS = ("10.99.91.1", 41234)
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
Obj = dict[str, Any]


# --- fixtures: the toolchain's copies -------------------------------------------------------------


@pytest.fixture(scope="module")
def eventing_config() -> Path:
    return toolchain.ensure("knative-eventing").parent / "config" / "eventing"


@pytest.fixture(scope="module")
def serving_config() -> Path:
    return toolchain.ensure("knative-serving").parent / "config"


@pytest.fixture(scope="module")
def kubectl() -> Path:
    return toolchain.ensure_all().kubectl


@pytest.fixture(scope="module")
def serving(serving_config: Path) -> release.Manifests:
    return release.serving_manifests(serving_config, AUTOSCALER)


@pytest.fixture(scope="module")
def features() -> dict[str, str]:
    return release.project_eventing_features(REPO)


@pytest.fixture(scope="module")
def eventing(eventing_config: Path, features: dict[str, str]) -> release.Manifests:
    return release.eventing_manifests(eventing_config, features)


@pytest.fixture(scope="module")
def plain(kubectl: Path) -> list[Obj]:
    """deploy/base as plain kustomize builds it."""
    return kustomize(kubectl, REPO / "deploy" / "base")


@pytest.fixture(scope="module")
def project(kubectl: Path) -> release.Manifests:
    return release.project_manifests(
        REPO, kubectl, chart_ref=CHART_REF, api_address=API_ADDRESS, registry_ca_pem=CA_PEM
    )


# --- helpers ---------------------------------------------------------------------------------------


def by_key(docs: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    found = {key(d): d for d in docs}
    assert len(found) == len(docs), "two objects of the same kind, namespace and name"
    return found


def one(docs: tuple[Obj, ...] | list[Obj], kind: str, name: str) -> Obj:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def workloads(docs: tuple[Obj, ...] | list[Obj]) -> list[Obj]:
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet")]


def assert_no_ko(manifests: release.Manifests) -> None:
    left = [(key(d), s) for d in manifests.all() for s in strings(d) if "ko://" in s]
    assert not left, left


def assert_images_local(docs: tuple[Obj, ...] | list[Obj]) -> None:
    images = [i for d in docs for i in pod_images(d) if d["kind"] in ("Deployment", "StatefulSet", "Image")]
    assert images
    assert all(i.startswith(f"{REGISTRY}/") for i in images), images


def assert_upstream_pods_kept(ours: tuple[Obj, ...], source_files: list[Path]) -> None:
    """Each Deployment's containers keep upstream's securityContext, resources, probes and ports."""
    upstream = {key(d): d for path in source_files for d in load(path) if d["kind"] == "Deployment"}
    deployments = [d for d in ours if d["kind"] == "Deployment"]
    assert {key(d) for d in deployments} <= set(upstream)
    for ours_doc in deployments:
        theirs = upstream[key(ours_doc)]
        ours_pod, theirs_pod = ours_doc["spec"]["template"]["spec"], theirs["spec"]["template"]["spec"]
        assert ours_pod.get("securityContext") == theirs_pod.get("securityContext")
        for mine, up in zip(ours_pod["containers"], theirs_pod["containers"], strict=True):
            for field in ("securityContext", "resources", "readinessProbe", "livenessProbe", "ports", "args"):
                assert mine.get(field) == up.get(field), (key(ours_doc), field)


def assert_dependencies_present(manifests: release.Manifests) -> None:
    """What a Deployment's pods need is in the same release, before it: its ServiceAccount and
    every ConfigMap key its env reads."""
    objects = list(manifests.objects)
    for position, deployment in enumerate(workloads(objects)):
        index = objects.index(deployment)
        earlier = objects[:index]
        pod = deployment["spec"]["template"]["spec"]
        account = pod.get("serviceAccountName")
        if account:
            assert any(d["kind"] == "ServiceAccount" and d["metadata"]["name"] == account for d in earlier), (
                key(deployment),
                account,
                position,
            )
        for container in pod["containers"]:
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
                if ref and not ref.get("optional"):
                    configmap = one(earlier, "ConfigMap", ref["name"])
                    assert ref["key"] in (configmap.get("data") or {}), (key(deployment), ref)


# --- CoreDNS and Traefik ---------------------------------------------------------------------------


def test_coredns_serves_the_kubelets_cluster_dns_address() -> None:
    docs = release.coredns_manifests()
    service = one(docs, "Service", "kube-dns")
    deployment = one(docs, "Deployment", "coredns")
    assert service["metadata"]["namespace"] == deployment["metadata"]["namespace"] == "kube-system"
    assert service["spec"]["clusterIP"] == "10.0.0.10"
    assert {(p["port"], p["protocol"]) for p in service["spec"]["ports"]} == {(53, "UDP"), (53, "TCP")}
    template = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (container,) = template["spec"]["containers"]
    assert container["image"] == COREDNS.ref
    assert "command" not in container and "args" not in container  # the image's entry point names the Corefile
    assert container["readinessProbe"]["httpGet"]["port"] == 8181
    assert container["livenessProbe"]["httpGet"]["port"] == 8080
    binding = one(docs, "ClusterRoleBinding", "kubeopera-testbed:coredns")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]
    assert template["spec"]["serviceAccountName"] == "coredns"


def test_traefik_is_the_knative_ingress_with_only_the_rights_its_provider_uses() -> None:
    docs = release.traefik_manifests()
    assert {d["metadata"].get("namespace", "knative-serving") for d in docs} == {"knative-serving"}
    deployment = one(docs, "Deployment", "traefik")
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert container["image"] == TRAEFIK.ref
    args = container["args"]
    for flag in (
        "--experimental.knative=true",
        "--providers.knative=true",
        "--global.checkNewVersion=false",
        "--global.sendAnonymousUsage=false",
        "--providers.knative.publicService.name=traefik",
        "--providers.knative.privateService.name=traefik-internal",
    ):
        assert flag in args
    ports = {p["containerPort"] for p in container["ports"]}
    for name in ("traefik", "traefik-internal"):
        service = one(docs, "Service", name)
        assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
        assert [p["port"] for p in service["spec"]["ports"]] == [80]
        assert service["spec"]["ports"][0]["targetPort"] in ports
    role = one(docs, "ClusterRole", "kubeopera-testbed:traefik-knative")
    rights = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    read = {"get", "list", "watch"}
    assert rights == {
        *(("networking.internal.knative.dev", "ingresses", v) for v in read),
        ("networking.internal.knative.dev", "ingresses/status", "update"),
        *(("", r, v) for r in ("services", "secrets") for v in read),
    }
    binding = one(docs, "ClusterRoleBinding", role["metadata"]["name"])
    assert binding["subjects"][0]["name"] == template["spec"]["serviceAccountName"]


# --- ko:// resolution ------------------------------------------------------------------------------


def test_resolve_ko_replaces_known_references_and_refuses_the_rest() -> None:
    ref = "ko://knative.dev/eventing/cmd/controller"
    doc: Obj = {"kind": "Deployment", "metadata": {"name": "x"}, "spec": {"a": [ref, {"b": ref}]}}
    assert resolve_ko(doc)["spec"] == {"a": [KO_IMAGES[ref], {"b": KO_IMAGES[ref]}]}
    assert doc["spec"]["a"][0] == ref  # a copy
    with pytest.raises(ReleaseError, match="no local image is built for ko://knative.dev/eventing/cmd/jobsink"):
        resolve_ko({"kind": "Deployment", "metadata": {"name": "x"}, "image": "ko://knative.dev/eventing/cmd/jobsink"})
    with pytest.raises(ReleaseError, match="ko:// reference left"):
        resolve_ko({"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": f"image: {ref}"}})


# --- Knative Serving -------------------------------------------------------------------------------


@pytest.mark.integration
def test_serving_has_no_ko_reference_and_only_local_images(serving: release.Manifests) -> None:
    assert_no_ko(serving)
    assert_images_local(serving.objects)
    config = one(serving.objects, "ConfigMap", "config-deployment")
    assert config["data"]["queue-sidecar-image"] == KO_IMAGES["ko://knative.dev/serving/cmd/queue"]
    image = one(serving.objects, "Image", "queue-proxy")
    assert image["spec"]["image"] == KO_IMAGES["ko://knative.dev/serving/cmd/queue"]


@pytest.mark.integration
def test_serving_crds_come_apart_with_networking_and_caching(serving: release.Manifests) -> None:
    assert serving.crds and all(d["kind"] == "CustomResourceDefinition" for d in serving.crds)
    assert not [d for d in serving.objects if d["kind"] == "CustomResourceDefinition"]
    names = {d["metadata"]["name"] for d in serving.crds}
    assert {
        "services.serving.knative.dev",
        "revisions.serving.knative.dev",
        "podautoscalers.autoscaling.internal.knative.dev",
        "certificates.networking.internal.knative.dev",
        "ingresses.networking.internal.knative.dev",
        "serverlessservices.networking.internal.knative.dev",
        "clusterdomainclaims.networking.internal.knative.dev",
        "images.caching.internal.knative.dev",
    } <= names
    # the instances of those CRDs are among the objects, hence two applies
    assert {d["kind"] for d in serving.objects} >= {"Certificate", "Image"}


@pytest.mark.integration
def test_serving_configuration_changes(serving: release.Manifests) -> None:
    network = one(serving.objects, "ConfigMap", "config-network")
    assert network["data"]["ingress-class"] == INGRESS_CLASS == "traefik.ingress.networking.knative.dev"
    assert "_example" in network["data"]  # merged, not replaced
    registries = one(serving.objects, "ConfigMap", "config-deployment")["data"]["registries-skipping-tag-resolving"]
    assert registries.split(",") == ["kind.local", "ko.local", "dev.local", REGISTRY]
    autoscaler = one(serving.objects, "ConfigMap", "config-autoscaler")["data"]
    assert autoscaler.items() >= AUTOSCALER.items() and "_example" in autoscaler


@pytest.mark.integration
def test_serving_keeps_upstream_pods_and_leaves_out_only_hpas(serving: release.Manifests, serving_config: Path) -> None:
    kinds = {d["kind"] for d in serving.objects}
    assert not kinds & {"HorizontalPodAutoscaler", "PodDisruptionBudget"}
    names = {d["metadata"]["name"] for d in serving.objects if d["kind"] == "Deployment"}
    assert names == {"controller", "webhook", "activator", "autoscaler"}
    assert_upstream_pods_kept(serving.objects, sorted((serving_config / "serving" / "deployments").glob("*.yaml")))
    assert_dependencies_present(serving)
    assert serving.objects[0]["kind"] == "Namespace"
    kinds_in_order = [d["kind"] for d in serving.objects]
    assert kinds_in_order.index("Deployment") > max(
        i for i, k in enumerate(kinds_in_order) if k in ("ServiceAccount", "ConfigMap")
    )


@pytest.mark.integration
@pytest.mark.parametrize("window", ["5s", "2h", "20"])
def test_serving_refuses_a_stable_window_knative_would_refuse(serving_config: Path, window: str) -> None:
    with pytest.raises(ValueError):
        release.serving_manifests(serving_config, {"stable-window": window})


# --- Knative Eventing ------------------------------------------------------------------------------


@pytest.mark.integration
def test_eventing_has_no_ko_reference_and_only_local_images(eventing: release.Manifests) -> None:
    assert_no_ko(eventing)
    assert_images_local(eventing.objects)
    controller = one(eventing.objects, "Deployment", "eventing-controller")
    env = {e["name"]: e.get("value") for e in controller["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["APISERVER_RA_IMAGE"] == KO_IMAGES["ko://knative.dev/eventing/cmd/apiserver_receive_adapter"]
    assert env["AUTH_PROXY_IMAGE"] == f"{REGISTRY}/not-built/auth-proxy:none"
    imc = one(eventing.objects, "Deployment", "imc-controller")
    env = {e["name"]: e.get("value") for e in imc["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DISPATCHER_IMAGE"] == KO_IMAGES["ko://knative.dev/eventing/cmd/in_memory/channel_dispatcher"]


@pytest.mark.integration
def test_eventing_components_and_what_is_left_out(eventing: release.Manifests, eventing_config: Path) -> None:
    deployments = {d["metadata"]["name"] for d in workloads(eventing.objects)}
    assert deployments == {
        "eventing-controller",
        "eventing-webhook",
        "pingsource-mt-adapter",
        "imc-controller",
        "imc-dispatcher",
        "mt-broker-controller",
        "mt-broker-ingress",
        "mt-broker-filter",
    }
    names = {d["metadata"]["name"] for d in eventing.objects}
    assert not {"job-sink", "request-reply", "request-reply-keys", "knative-eventing-job-sink"} & names
    assert not {d["kind"] for d in eventing.objects} & {"HorizontalPodAutoscaler", "PodDisruptionBudget"}
    assert all((eventing_config / f).is_file() for f in LEFT_OUT_FILES)  # what is named still exists
    assert {"broker-ingress", "broker-filter", "imc-dispatcher", "eventing-webhook"} <= {
        d["metadata"]["name"] for d in eventing.objects if d["kind"] == "Service"
    }
    sources = [eventing_config / p for p in ("core", "channels/in-memory-channel", "brokers/mt-channel-broker")]
    assert_upstream_pods_kept(eventing.objects, [f for s in sources for f in sorted(s.rglob("*.yaml"))])


@pytest.mark.integration
def test_eventing_crds_come_apart(eventing: release.Manifests) -> None:
    assert all(d["kind"] == "CustomResourceDefinition" for d in eventing.crds)
    assert not [d for d in eventing.objects if d["kind"] == "CustomResourceDefinition"]
    names = {d["metadata"]["name"] for d in eventing.crds}
    assert {
        "brokers.eventing.knative.dev",
        "triggers.eventing.knative.dev",
        "apiserversources.sources.knative.dev",
        "pingsources.sources.knative.dev",
        "sinkbindings.sources.knative.dev",
        "inmemorychannels.messaging.knative.dev",
        "subscriptions.messaging.knative.dev",
        "eventpolicies.eventing.knative.dev",
        # kept although their components are left out: the controller watches them
        "jobsinks.sinks.knative.dev",
        "requestreplies.eventing.knative.dev",
    } <= names


@pytest.mark.integration
def test_eventing_features_merged(eventing: release.Manifests, eventing_config: Path, features: dict[str, str]) -> None:
    assert features == {"delivery-retryafter": "enabled", "authentication-oidc": "enabled"}
    (upstream,) = load(eventing_config / "core" / "configmaps" / "features.yaml")
    merged = one(eventing.objects, "ConfigMap", "config-features")["data"]
    assert merged == {**upstream["data"], **features}


@pytest.mark.integration
def test_eventing_pods_find_what_they_need(eventing: release.Manifests) -> None:
    """Every ServiceAccount and ConfigMap key a Deployment needs, before it: the two image
    ConfigMaps the module zip lacks are stood in for."""
    assert_dependencies_present(eventing)
    for name in ("eventing-integrations-images", "eventing-transformations-images"):
        data = one(eventing.objects, "ConfigMap", name)["data"]
        assert data and all(v.startswith(f"{REGISTRY}/not-built/") for v in data.values())


# --- the project -----------------------------------------------------------------------------------


def undo_service_changes(service: Obj, plain_service: Obj, *, helm: bool, annotations: Mapping[str, str]) -> Obj:
    """A function's Knative Service with (a), (d) and (e) taken back out; asserts each was made."""
    service = copy.deepcopy(service)
    template = service["spec"]["template"]
    plain_template = plain_service["spec"]["template"]
    found = template["metadata"].get("annotations") or {}
    plain_annotations = plain_template["metadata"].get("annotations") or {}
    for name, value in annotations.items():
        assert found.pop(name) == value
        if name in plain_annotations:
            found[name] = plain_annotations[name]
    pod, plain_pod = template["spec"], plain_template["spec"]
    for container, plain_container in zip(pod["containers"], plain_pod["containers"], strict=True):
        assert container["image"] == FUNCTION_IMAGE
        assert plain_container["image"].startswith("ghcr.io/kubeopera/kubeopera-tenants:")
        container["image"] = plain_container["image"]
        if helm:
            assert container["env"].pop() == {"name": "SSL_CERT_FILE", "value": REGISTRY_CA_FILE}
            mount = container["volumeMounts"].pop()
            assert mount["name"] == REGISTRY_CA and REGISTRY_CA_FILE.startswith(mount["mountPath"] + "/")
    if helm:
        assert pod["volumes"].pop() == {"name": REGISTRY_CA, "configMap": {"name": REGISTRY_CA}}
    return service


def function_services(docs: list[Obj] | tuple[Obj, ...]) -> dict[str, Obj]:
    return {
        d["metadata"]["name"]: d for d in docs if d["apiVersion"] == "serving.knative.dev/v1" and d["kind"] == "Service"
    }


def helm_modules_in_source() -> set[str]:
    """The function modules whose create_app asks for a helm client."""
    return {p.stem for p in (REPO / "functions").glob("*.py") if re.search(r"\.helm_client\(\)", p.read_text())}


def test_helm_functions_are_the_ones_that_ask_for_a_helm_client() -> None:
    assert helm_modules_in_source() == HELM_MODULES


@pytest.mark.integration
def test_project_is_deploy_base_with_only_the_documented_changes(project: release.Manifests, plain: list[Obj]) -> None:
    assert list(project.crds) == load(REPO / "deploy" / "crd" / "tenants.yaml")
    ours, theirs = by_key(list(project.objects)), by_key(plain)
    added = set(ours) - set(theirs)
    assert added == {
        ("Service", NAMESPACE, API_SERVICE),
        ("EndpointSlice", NAMESPACE, API_SERVICE),
        ("ConfigMap", NAMESPACE, REGISTRY_CA),
    }
    assert set(theirs) <= set(ours)
    # the same order, the additions right after the namespace
    assert [key(d) for d in project.objects if key(d) not in added] == [key(d) for d in plain]
    assert [key(d) for d in project.objects[1:4]] == [
        ("Service", NAMESPACE, API_SERVICE),
        ("EndpointSlice", NAMESPACE, API_SERVICE),
        ("ConfigMap", NAMESPACE, REGISTRY_CA),
    ]

    services = function_services(plain)
    modules = function_modules(plain)
    assert {modules[s] for s in services} >= HELM_MODULES
    for k, plain_doc in theirs.items():
        doc = ours[k]
        kind, _, name = k
        if kind == "ConfigMap" and name == "tenant-functions-config":
            assert doc["data"]["VCLUSTER_CHART"] == CHART_REF
            assert {**doc["data"], "VCLUSTER_CHART": plain_doc["data"]["VCLUSTER_CHART"]} == plain_doc["data"]
            assert {k2: v for k2, v in doc.items() if k2 != "data"} == {
                k2: v for k2, v in plain_doc.items() if k2 != "data"
            }
        elif name in services and doc["apiVersion"] == "serving.knative.dev/v1":
            helm = modules[name] in HELM_MODULES
            assert undo_service_changes(doc, plain_doc, helm=helm, annotations={}) == plain_doc, name
        else:
            assert doc == plain_doc, k


@pytest.mark.integration
def test_project_kubeopera_api_standin_points_at_the_host(project: release.Manifests, plain: list[Obj]) -> None:
    config = one(plain, "ConfigMap", "tenant-functions-config")
    assert config["data"]["KUBEOPERA_API_BASE_URL"] == "http://kubeopera-api:8080"
    service = one(project.objects, "Service", API_SERVICE)
    assert "selector" not in service["spec"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == 8080
    endpoints = one(project.objects, "EndpointSlice", API_SERVICE)
    assert endpoints["metadata"]["labels"]["kubernetes.io/service-name"] == API_SERVICE
    assert endpoints["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] != (
        "endpointslice-controller.k8s.io"
    )
    assert endpoints["addressType"] == "IPv4"
    assert endpoints["endpoints"] == [{"addresses": [API_ADDRESS[0]], "conditions": {"ready": True}}]
    assert endpoints["ports"] == [{"name": port["name"], "port": API_ADDRESS[1], "protocol": "TCP"}]
    ca = one(project.objects, "ConfigMap", REGISTRY_CA)
    assert ca["data"] == {"ca.crt": CA_PEM.decode()}


@pytest.mark.integration
def test_project_without_a_ca_and_with_test_overrides(kubectl: Path, plain: list[Obj]) -> None:
    annotations = {"autoscaling.knative.dev/window": "10s", "autoscaling.knative.dev/min-scale": "1"}
    project = release.project_manifests(
        REPO,
        kubectl,
        chart_ref=CHART_REF,
        api_address=API_ADDRESS,
        registry_ca_pem=None,
        autoscaling=annotations,
        function_config={"READY_POLL_SECONDS": "1"},
    )
    names = {key(d) for d in project.objects}
    assert ("ConfigMap", NAMESPACE, REGISTRY_CA) not in names
    assert ("Service", NAMESPACE, API_SERVICE) in names
    config = one(project.objects, "ConfigMap", "tenant-functions-config")["data"]
    assert config["READY_POLL_SECONDS"] == "1" and config["VCLUSTER_CHART"] == CHART_REF
    plain_services = function_services(plain)
    for name, service in function_services(project.objects).items():
        undone = undo_service_changes(service, plain_services[name], helm=False, annotations=annotations)
        assert undone == plain_services[name], name
        assert "SSL_CERT_FILE" not in yaml.safe_dump(service)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"autoscaling": {"serving.knative.dev/foo": "x"}}, "only autoscaling.knative.dev/"),
        ({"function_config": {"VCLUSTER_CHART": "oci://elsewhere/vcluster"}}, "VCLUSTER_CHART"),
        ({"registry_ca_pem": b"not a certificate"}, "no PEM certificate"),
        ({"api_address": ("kubeopera-api.example", 8080)}, "does not appear to be an IPv4 or IPv6 address"),
    ],
)
def test_project_refuses_overrides_it_does_not_document(kubectl: Path, overrides: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"chart_ref": CHART_REF, "api_address": API_ADDRESS, "registry_ca_pem": CA_PEM}
    with pytest.raises(ValueError, match=message):
        release.project_manifests(REPO, kubectl, **{**arguments, **overrides})
