"""The cluster tier's images, by name: what each one holds and the reference pods use for it.

No registry is involved: every image is built on this machine (:mod:`testbed.images`) and imported
into the node's containerd, under ``kubeopera.local/<name>:<tag>``. Knative Serving is told not
to resolve tags of ``kubeopera.local`` (``registries-skipping-tag-resolving``), and no tag is
``latest``, so the kubelet never pulls (pull policy IfNotPresent finds the image).

``KO_IMAGES`` maps the ``ko://<Go package>`` references of Knative's release manifests to the
image built from that package's binary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from testbed.toolchain.versions import (
    COREDNS_VERSION,
    KNATIVE_EVENTING_VERSION,
    KNATIVE_SERVING_VERSION,
    TRAEFIK_VERSION,
)

REGISTRY = "kubeopera.local"
NONROOT_UID = 65532  # the user Knative's images run as (runAsNonRoot in its Deployments)


@dataclass(frozen=True)
class BinaryImage:
    """An image holding one static Go binary (at ``/ko-app/<name>``, as ko lays it out), the CA
    bundle and a passwd with the non-root user; its entry point is the binary."""

    name: str
    tag: str

    @property
    def ref(self) -> str:
        return f"{REGISTRY}/{self.name}:{self.tag}"


def _serving(binary: str) -> BinaryImage:
    return BinaryImage(f"kn-serving-{binary}", KNATIVE_SERVING_VERSION)


def _eventing(binary: str) -> BinaryImage:
    return BinaryImage(f"kn-eventing-{binary.replace('_', '-')}", KNATIVE_EVENTING_VERSION)


PAUSE = BinaryImage("pause", "1")
COREDNS = BinaryImage("coredns", COREDNS_VERSION)
TRAEFIK = BinaryImage("traefik", TRAEFIK_VERSION)

# The function image: the project's wheel in the Dockerfile's layout (testbed.images.function).
FUNCTION_IMAGE = f"{REGISTRY}/kubeopera-tenants:local"

SERVING_BINARIES = ("controller", "webhook", "activator", "autoscaler", "queue")
EVENTING_BINARIES = (
    "controller",
    "webhook",
    "mtchannel_broker",
    "broker_ingress",
    "broker_filter",
    "in_memory_channel_controller",
    "in_memory_channel_dispatcher",
    "mtping",
    "apiserver_receive_adapter",
)

SERVING_IMAGES: Mapping[str, BinaryImage] = {b: _serving(b) for b in SERVING_BINARIES}
EVENTING_IMAGES: Mapping[str, BinaryImage] = {b: _eventing(b) for b in EVENTING_BINARIES}

# The Go package of each binary, as Knative's manifests name it after ko://.
_EVENTING_PACKAGES: Mapping[str, str] = {
    "controller": "knative.dev/eventing/cmd/controller",
    "webhook": "knative.dev/eventing/cmd/webhook",
    "mtchannel_broker": "knative.dev/eventing/cmd/mtchannel_broker",
    "broker_ingress": "knative.dev/eventing/cmd/broker/ingress",
    "broker_filter": "knative.dev/eventing/cmd/broker/filter",
    "in_memory_channel_controller": "knative.dev/eventing/cmd/in_memory/channel_controller",
    "in_memory_channel_dispatcher": "knative.dev/eventing/cmd/in_memory/channel_dispatcher",
    "mtping": "knative.dev/eventing/cmd/mtping",
    "apiserver_receive_adapter": "knative.dev/eventing/cmd/apiserver_receive_adapter",
}

KO_IMAGES: Mapping[str, str] = {
    **{f"ko://knative.dev/serving/cmd/{b}": image.ref for b, image in SERVING_IMAGES.items()},
    **{f"ko://{_EVENTING_PACKAGES[b]}": image.ref for b, image in EVENTING_IMAGES.items()},
}

ALL_BINARY_IMAGES: tuple[BinaryImage, ...] = (
    PAUSE,
    COREDNS,
    TRAEFIK,
    *SERVING_IMAGES.values(),
    *EVENTING_IMAGES.values(),
)
