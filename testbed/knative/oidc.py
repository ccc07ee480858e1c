"""Knative Eventing's ``authentication-oidc`` on the test bed: the feature flags, what the cluster
must hold for it, and Knative's names for the OIDC identities it makes.

With the feature on, every hop of an event carries a ServiceAccount token (``Authorization:
Bearer``) from the TokenRequest API, for the audience of the receiver, and each Knative receiver
(broker ingress, channel dispatcher, broker filter) verifies it. What was read in the source of
knative.dev/eventing v0.48.0 and seen on the wire here:

========================  ===========================================  =====================================
hop                       identity (``sub``)                           audience (``aud``)
========================  ===========================================  =====================================
ApiServerSource → ingress ``<source>-oidc-sources.knative.dev-``       the Broker's ``status.address.audience``
                          ``apiserversource``                          ``eventing.knative.dev/broker/<ns>/<name>``
PingSource → ingress      ``<source>-oidc-sources.knative.dev-``       the same
                          ``pingsource`` (sent by ``mtping``)
ingress → channel         ``knative-eventing:mt-broker-ingress-oidc``  ``messaging.knative.dev/inmemorychannel/``
                                                                       ``<ns>/<channel>``
dispatcher → filter       the Trigger's Subscription's identity        ``mt-broker-filter``
(deliveries, replies,     (``kmeta.ChildName(<subscription>,``
dead letters)             ``"-oidc-messaging.knative.dev-subscription")``)
filter → subscriber       the Trigger's (``<trigger>-oidc-eventing.``  the Trigger's ``status.subscriberAudience``
                          ``knative.dev-trigger``)                     (``spec.subscriber.audience``, else the
                                                                       Addressable's ``status.address.audience``;
                                                                       none: no token is sent)
filter → dead-letter sink the Trigger's                                ``status.deadLetterSinkAudience`` (the
                                                                       Trigger's ``deadLetterSink.audience``, else
                                                                       the Broker's)
filter → ingress (reply)  the Trigger's                                the Broker's ``status.address.audience``
========================  ===========================================  =====================================

A Trigger that has a ``delivery`` without a dead-letter sink (while the Broker has one) is the
exception: its Subscription falls back to the channel's dead-letter sink, and the **channel
dispatcher** sends there directly, with the Subscription's identity, whose name contains the
Trigger's UID (``pkg/reconciler/subscription/subscription.go`` resolveDeadLetterSink).

The receivers verify tokens against the issuer's OIDC discovery document
(``oidc-discovery-base-url``, default ``https://kubernetes.default.svc``, fetched with the
process's API client only for that exact URL; ``pkg/auth/verifier.go``). The test bed has no
cluster DNS for that name (the service proxy forwards plain HTTP only), so it points the flag at
the API server's own loopback URL, lets anyone read the discovery document and the signing keys
(the ``system:service-account-issuer-discovery`` role bound to ``system:unauthenticated``, as the
Kubernetes documentation shows for public discovery), and gives the Knative processes the test
bed's CA as ``SSL_CERT_FILE`` (:func:`testbed.knative.process_table.pod_environment`). The broker
ingress sends to its channel as ``mt-broker-ingress-oidc``, a ServiceAccount of Knative's broker
config (``config/brokers/mt-channel-broker/roles/``) the core install does not hold: it is applied.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.knative.kubectl import kubectl
from testbed.toolchain import Toolchain

FEATURE = "authentication-oidc"
DISCOVERY_URL_FLAG = "oidc-discovery-base-url"
FILTER_AUDIENCE = "mt-broker-filter"  # pkg/broker/filter/filter_handler.go FilterAudience
INGRESS_IDENTITY = "mt-broker-ingress-oidc"  # pkg/broker/ingress/ingress_handler.go
PUBLIC_DISCOVERY_BINDING = "kubeopera-testbed:service-account-issuer-discovery"

_LONGEST, _MD5_LEN = 63, 32
_HEAD = _LONGEST - _MD5_LEN


@dataclass(frozen=True)
class Issuer:
    """Where Knative's receivers fetch the token issuer's discovery document and keys: the API
    server's URL, and the CA its serving certificate chains to."""

    url: str
    ca_file: Path


def features(issuer: Issuer | None) -> dict[str, str]:
    """The config-features keys the test bed sets over the repository's patch: the feature on, with
    discovery at the API server, or off."""
    if issuer is None:
        return {FEATURE: "disabled"}
    return {FEATURE: "enabled", DISCOVERY_URL_FLAG: issuer.url}


def install_prerequisites(tools: Toolchain, kubeconfig: Path) -> None:
    """The broker ingress's OIDC ServiceAccount and public issuer discovery (see the module doc)."""
    roles = tools.knative_config / "eventing" / "brokers" / "mt-channel-broker" / "roles"
    binding: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": PUBLIC_DISCOVERY_BINDING},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:service-account-issuer-discovery",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}],
    }
    docs = [d for d in yaml.safe_load_all((roles / "ingress-serviceaccount-oidc.yaml").read_text()) if d]
    kubectl(tools, kubeconfig, "apply", "-f", "-", input=yaml.safe_dump_all([*docs, binding]))


def child_name(parent: str, suffix: str) -> str:
    """``kmeta.ChildName`` of knative.dev/pkg: ``parent + suffix``, hashed to fit 63 characters."""
    if len(parent) <= _LONGEST - len(suffix):
        return parent + suffix
    if _HEAD - len(suffix) <= 0:
        digest = hashlib.md5((parent + suffix).encode(), usedforsecurity=False).hexdigest()
        name = parent[:_HEAD] + digest
        if (room := _LONGEST - len(name)) > 0:
            name += suffix[:room]
        return re.sub(r"[^a-zA-Z0-9]+$", "", name)
    return parent[: _HEAD - len(suffix)] + hashlib.md5(parent.encode(), usedforsecurity=False).hexdigest() + suffix


def identity_name(group: str, kind: str, name: str) -> str:
    """The ServiceAccount Knative makes for an object's OIDC identity, in the object's namespace
    (``auth.GetOIDCServiceAccountNameForResource``, pkg/auth/serviceaccount.go)."""
    return child_name(name, f"-oidc-{group}-{kind}").lower()


def broker_audience(namespace: str, broker: str) -> str:
    """The Broker's ``status.address.audience`` (``auth.GetAudience``, pkg/auth/audience.go)."""
    return f"eventing.knative.dev/broker/{namespace}/{broker}".lower()


def trigger_identity(trigger: str) -> str:
    return identity_name("eventing.knative.dev", "Trigger", trigger)


def subject(namespace: str, service_account: str) -> str:
    """The username the API server gives a ServiceAccount's token (a JWT's ``sub``)."""
    return f"system:serviceaccount:{namespace}:{service_account}"


def published_identity(obj: Mapping[str, Any]) -> str | None:
    """The identity an object publishes in ``status.auth.serviceAccountName`` (None: not yet, or off)."""
    return ((obj.get("status") or {}).get("auth") or {}).get("serviceAccountName")
