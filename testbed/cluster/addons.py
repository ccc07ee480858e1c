"""The node's two add-ons that are not Knative's own release: cluster DNS (:func:`coredns_manifests`)
and the KIngress implementation Knative Serving routes through (:func:`traefik_manifests`).

Both follow the prototype (``shared/real-node/coredns.yaml`` and ``serving/traefik.yaml``, observed
working), with the local images of :mod:`testbed.images.catalog`, and these changes:

- CoreDNS runs as the non-root user of the image catalog with no capability, a read-only root
  filesystem and the pod sysctl ``net.ipv4.ip_unprivileged_port_start=53`` (a "safe" sysctl, in the
  pod's own network namespace) to bind port 53, instead of as root; requests and limits as
  Kubernetes' own CoreDNS manifest has them;
- Traefik's ClusterRole holds only what its Knative provider uses (v3.6.12,
  ``pkg/provider/kubernetes/knative/client.go``: informers on KIngresses, Services and Secrets in
  every namespace, and ``UpdateStatus`` of a KIngress). The prototype's extra rights (Endpoints,
  EndpointSlices, Namespaces, ``patch`` on the status) are dropped. Its container, like Knative's
  own, runs non-root with no capability and a read-only root filesystem (nothing of Traefik's
  configuration here writes a file), and it does not phone home (``--global.checkNewVersion=false
  --global.sendAnonymousUsage=false``).
"""

from __future__ import annotations

from typing import Any

from testbed.cluster.yamldocs import Obj
from testbed.images.catalog import COREDNS, NONROOT_UID, TRAEFIK
from testbed.node.layout import CLUSTER_DNS

DNS_NAMESPACE = "kube-system"
DNS_LABELS = {"k8s-app": "kube-dns"}
TRAEFIK_NAMESPACE = "knative-serving"  # Knative Serving's namespace: apply after serving_manifests
TRAEFIK_LABELS = {"app.kubernetes.io/name": "traefik", "app.kubernetes.io/part-of": "kubeopera-testbed"}
PUBLIC_SERVICE = "traefik"  # the KIngress's public load balancer
PRIVATE_SERVICE = "traefik-internal"  # cluster-local KIngresses (the functions): their URLs CNAME to it
WEB_PORT, WEB_INTERNAL_PORT = 8080, 8081


def _restricted() -> dict[str, Any]:
    """A container securityContext as Knative's own Deployments have it."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": NONROOT_UID,
        "runAsGroup": NONROOT_UID,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _cluster_role_binding(name: str, account: str, namespace: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


def coredns_manifests() -> list[Obj]:
    """CoreDNS in ``kube-system``: ServiceAccount, ClusterRole and binding (what its kubernetes
    plugin lists and watches), the Deployment (image ``COREDNS``, whose baked-in Corefile serves
    ``cluster.local`` with ``health :8080`` and ``ready :8181``; its entry point is
    ``/ko-app/coredns -conf /etc/coredns/Corefile``), and the Service ``kube-dns`` at the
    kubelet's cluster DNS address."""
    name = "coredns"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": DNS_NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "kubeopera-testbed:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        },
        _cluster_role_binding("kubeopera-testbed:coredns", name, DNS_NAMESPACE),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": DNS_NAMESPACE, "labels": dict(DNS_LABELS)},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": dict(DNS_LABELS)},
                "template": {
                    "metadata": {"labels": dict(DNS_LABELS)},
                    "spec": {
                        "serviceAccountName": name,
                        "dnsPolicy": "Default",  # not itself: it has no upstream to forward to
                        "terminationGracePeriodSeconds": 2,
                        "securityContext": {
                            "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}],
                        },
                        "containers": [
                            {
                                "name": name,
                                "image": COREDNS.ref,
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 1},
                                "livenessProbe": {
                                    "httpGet": {"path": "/health", "port": 8080},
                                    "periodSeconds": 10,
                                    "failureThreshold": 5,
                                },
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "70Mi"},
                                    "limits": {"memory": "170Mi"},
                                },
                                "securityContext": _restricted(),
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": DNS_NAMESPACE, "labels": dict(DNS_LABELS)},
            "spec": {
                "clusterIP": CLUSTER_DNS,
                "selector": dict(DNS_LABELS),
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                ],
            },
        },
    ]


def traefik_manifests() -> list[Obj]:
    """Traefik (image ``TRAEFIK``) as Knative Serving's KIngress implementation, in
    ``knative-serving`` (so after :func:`testbed.cluster.serving.serving_manifests`, whose
    ``config-network`` names its class ``traefik.ingress.networking.knative.dev``): ServiceAccount,
    ClusterRole and binding, the Deployment (public entry point ``web`` on 8080, private
    ``web-internal`` on 8081, ``/ping`` on ``web``), and the Services ``traefik`` and
    ``traefik-internal`` (port 80) that KIngress statuses name as load balancers."""
    name = "traefik"
    role = "kubeopera-testbed:traefik-knative"
    args = [
        "--experimental.knative=true",
        "--providers.knative=true",
        "--providers.knative.publicEntrypoints=web",
        f"--providers.knative.publicService.name={PUBLIC_SERVICE}",
        f"--providers.knative.publicService.namespace={TRAEFIK_NAMESPACE}",
        "--providers.knative.privateEntrypoints=web-internal",
        f"--providers.knative.privateService.name={PRIVATE_SERVICE}",
        f"--providers.knative.privateService.namespace={TRAEFIK_NAMESPACE}",
        f"--entryPoints.web.address=:{WEB_PORT}",
        f"--entryPoints.web-internal.address=:{WEB_INTERNAL_PORT}",
        "--ping=true",
        "--ping.entryPoint=web",
        "--log.level=INFO",
        "--global.checkNewVersion=false",
        "--global.sendAnonymousUsage=false",
    ]

    def service(service_name: str, target: int) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service_name, "namespace": TRAEFIK_NAMESPACE, "labels": dict(TRAEFIK_LABELS)},
            "spec": {
                "selector": dict(TRAEFIK_LABELS),
                "ports": [{"name": "http", "port": 80, "targetPort": target, "protocol": "TCP"}],
            },
        }

    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": TRAEFIK_NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": ["networking.internal.knative.dev"],
                    "resources": ["ingresses"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["networking.internal.knative.dev"],
                    "resources": ["ingresses/status"],
                    "verbs": ["update"],
                },
                {"apiGroups": [""], "resources": ["services", "secrets"], "verbs": ["get", "list", "watch"]},
            ],
        },
        _cluster_role_binding(role, name, TRAEFIK_NAMESPACE),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": TRAEFIK_NAMESPACE, "labels": dict(TRAEFIK_LABELS)},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": dict(TRAEFIK_LABELS)},
                "template": {
                    "metadata": {"labels": dict(TRAEFIK_LABELS)},
                    "spec": {
                        "serviceAccountName": name,
                        "terminationGracePeriodSeconds": 2,
                        "containers": [
                            {
                                "name": name,
                                "image": TRAEFIK.ref,
                                "args": args,
                                "ports": [
                                    {"name": "web", "containerPort": WEB_PORT},
                                    {"name": "web-internal", "containerPort": WEB_INTERNAL_PORT},
                                ],
                                "readinessProbe": {"httpGet": {"path": "/ping", "port": WEB_PORT}, "periodSeconds": 1},
                                "securityContext": _restricted(),
                            }
                        ],
                    },
                },
            },
        },
        service(PUBLIC_SERVICE, WEB_PORT),
        service(PRIVATE_SERVICE, WEB_INTERNAL_PORT),
    ]
