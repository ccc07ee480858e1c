"""The names Knative Eventing's installation is known by: its system namespace, its Services'
cluster names, and its images as the release files spell them."""

from __future__ import annotations

SYSTEM_NAMESPACE = "knative-eventing"
# Images as Knative's release files name them before `ko resolve`: the kubelet stand-in runs the
# toolchain's binary of the same package for them.
KO = "ko://knative.dev/eventing/cmd/"


def host(service: str, namespace: str = SYSTEM_NAMESPACE) -> str:
    """A Service's cluster name (what the service proxy resolves)."""
    return f"{service}.{namespace}.svc.cluster.local"
