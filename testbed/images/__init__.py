"""The cluster tier's images, built on this machine (there is no registry) and imported into the
node's containerd with ``ctr``.

Every image is one layer in an OCI image-layout tarball, named as :mod:`.catalog` says
(``kubeopera.local/<name>:<tag>``); :func:`build_all` builds them all from a
:class:`~testbed.toolchain.ClusterToolchain` and :func:`import_images` loads them. A tarball is
rebuilt only when what it is made of changes (:mod:`.cache`), so a second ``build_all`` is quick.

The modules, one concern each:

- :mod:`.catalog`: the images by name, their references (``BinaryImage``, ``FUNCTION_IMAGE``...);
- :mod:`.ocipack`: a root filesystem folder to an image-layout tarball, and reading one back;
- :mod:`.rootfs`: laying out a root filesystem folder (files, links, accounts, CA bundle, /tmp);
- :mod:`.binary`: the images of one static Go binary (Knative's, CoreDNS, Traefik, pause);
- :mod:`.function`: the function image, the project's wheel in the Dockerfile's layout, built of:
  :mod:`.interpreter` (CPython moved under ``/usr/local``, its standard library, bytecode),
  :mod:`.libraries` (the shared libraries ``ldd`` names), :mod:`.wheel` (the runtime wheel, built
  and installed as the Dockerfile does) and :mod:`.distributions` (its dependencies, copied from
  this environment);
- :mod:`.cache`: the tarballs' input digests;
- :mod:`.containerd`: ``ctr image import`` (skipping images already there) and ``ctr image ls``,
  each under a timeout;
- :mod:`.command`: running a short command under a timeout;
- :mod:`.errors`: :class:`ImageError` and its kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from testbed.images.binary import (
    COREFILE,
    BinaryLayout,
    binary_image_config,
    binary_layout,
    binary_rootfs,
    build_binary_image,
)
from testbed.images.catalog import (
    ALL_BINARY_IMAGES,
    COREDNS,
    EVENTING_IMAGES,
    FUNCTION_IMAGE,
    KO_IMAGES,
    NONROOT_UID,
    PAUSE,
    REGISTRY,
    SERVING_IMAGES,
    TRAEFIK,
    BinaryImage,
)
from testbed.images.containerd import image_digests, image_refs, import_images, wait_for_containerd
from testbed.images.distributions import resolve_dependencies
from testbed.images.errors import (
    CommandError,
    DependencyError,
    ImageError,
    InterpreterError,
    MissingInputError,
)
from testbed.images.function import build_function_image, function_image_config
from testbed.images.interpreter import current_interpreter
from testbed.images.ocipack import (
    ImageConfig,
    ImageLayout,
    IndexEntry,
    Owner,
    PackedImage,
    extract_layer,
    read_image,
    read_index,
    write_image,
)
from testbed.toolchain import ClusterToolchain


def binary_sources(tools: ClusterToolchain) -> dict[BinaryImage, Path]:
    """The binary each of the catalog's binary images is built around."""
    eventing = {name: tools.base.knative / name for name in EVENTING_IMAGES}
    eventing["webhook"] = tools.knative_eventing_webhook
    eventing["apiserver_receive_adapter"] = tools.base.apiserver_adapter
    sources: dict[BinaryImage, Path] = {
        PAUSE: tools.pause,
        COREDNS: tools.coredns,
        TRAEFIK: tools.traefik,
        **{image: tools.knative_serving / f"serving-{name}" for name, image in SERVING_IMAGES.items()},
        **{image: eventing[name] for name, image in EVENTING_IMAGES.items()},
    }
    missing = set(ALL_BINARY_IMAGES) - set(sources)
    if missing:  # a catalog entry this does not know yet
        raise ImageError(f"no binary known for {sorted(image.ref for image in missing)}")
    return sources


def build_all(tools: ClusterToolchain, out_dir: Path) -> list[Path]:
    """Build every image of the catalog into ``out_dir`` (reusing those whose inputs have not
    changed); return their tarballs, the binary images first, the function image last."""
    sources: Mapping[BinaryImage, Path] = binary_sources(tools)
    tarballs = [build_binary_image(image, sources[image], out_dir) for image in ALL_BINARY_IMAGES]
    tarballs.append(build_function_image(tools.base.helm, out_dir))
    return tarballs


__all__ = [
    "ALL_BINARY_IMAGES",
    "COREDNS",
    "COREFILE",
    "EVENTING_IMAGES",
    "FUNCTION_IMAGE",
    "KO_IMAGES",
    "NONROOT_UID",
    "PAUSE",
    "REGISTRY",
    "SERVING_IMAGES",
    "TRAEFIK",
    "BinaryImage",
    "BinaryLayout",
    "CommandError",
    "DependencyError",
    "ImageConfig",
    "ImageError",
    "ImageLayout",
    "IndexEntry",
    "InterpreterError",
    "MissingInputError",
    "Owner",
    "PackedImage",
    "binary_image_config",
    "binary_layout",
    "binary_rootfs",
    "binary_sources",
    "build_all",
    "build_binary_image",
    "build_function_image",
    "current_interpreter",
    "extract_layer",
    "function_image_config",
    "image_digests",
    "image_refs",
    "import_images",
    "read_image",
    "read_index",
    "resolve_dependencies",
    "wait_for_containerd",
    "write_image",
]
