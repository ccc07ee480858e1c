"""The images of one static Go binary (Knative's, CoreDNS, Traefik, pause), laid out as ko lays them out.

Each holds ``/ko-app/<binary>`` (its entry point), this machine's CA bundle at
``/etc/ssl/certs/ca-certificates.crt``, ``/etc/passwd`` and ``/etc/group`` with root and
``nonroot`` (:data:`~testbed.images.catalog.NONROOT_UID`), the time zone database and a sticky
``/tmp``, as ko's distroless base has them; nothing else
(no shell, no libc: the binaries are static, which :func:`build_binary_image` checks).

Who each runs as (:func:`binary_layout`):

- Knative's images, Traefik and pause: ``User 65532``, as ko's base image has it. Knative's
  Deployments set ``runAsNonRoot: true``, which the kubelet can verify only against a numeric
  user; Traefik listens on 8080/8081 here, and the upstream pause image is non-root too.
- CoreDNS: root, as the prototype ran it: it listens on :53. Its Corefile is baked in at
  ``/etc/coredns/Corefile`` (:data:`COREFILE`): the cluster zone and the reverse zones, health on
  :8080, readiness on :8181, errors and a 30 s cache, and no ``forward``: there is nothing
  upstream here, so a name outside the cluster gets SERVFAIL. The entry point passes ``-conf``.

ko also sets ``KO_DATA_PATH=/var/run/ko`` and ships a binary's ``kodata/`` there. Neither is
here: no package of knative.dev/serving, eventing or pkg at the pinned versions reads it (pkg's
``changeset`` takes the commit from the Go build info), and none of them has a ``kodata`` folder.
"""

from __future__ import annotations

import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from testbed.images.cache import builder_sources, forget, inputs_digest, is_fresh, record, tarball_path
from testbed.images.catalog import COREDNS, NONROOT_UID, BinaryImage
from testbed.images.errors import ImageError, MissingInputError
from testbed.images.ocipack import ImageConfig, write_image
from testbed.images.rootfs import (
    HOST_CA_BUNDLE,
    HOST_ZONEINFO,
    ROOT,
    Account,
    add_ca_bundle,
    add_tmp,
    add_zoneinfo,
    copy_file,
    write_accounts,
)
from testbed.images.rootfs import write_file as write_rootfs_file

KO_APP = "/ko-app"
NONROOT = Account("nonroot", NONROOT_UID, "/home/nonroot")
COREFILE_PATH = "/etc/coredns/Corefile"
COREFILE = """\
.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
    }
    cache 30
}
"""


@dataclass(frozen=True)
class BinaryLayout:
    """What a binary image adds to the binary: who runs it, its arguments, files baked in."""

    user: str = str(NONROOT_UID)  # empty: root
    args: tuple[str, ...] = ()  # after the binary, in the entry point
    files: tuple[tuple[str, bytes], ...] = ()  # (image path, content)
    exposed_ports: tuple[str, ...] = ()


_LAYOUTS = {
    COREDNS.name: BinaryLayout(
        user="",
        args=("-conf", COREFILE_PATH),
        files=((COREFILE_PATH, COREFILE.encode()),),
        exposed_ports=("53/tcp", "53/udp"),
    ),
}


def binary_layout(image: BinaryImage) -> BinaryLayout:
    """The layout of one of the catalog's binary images (non-root unless said otherwise)."""
    return _LAYOUTS.get(image.name, BinaryLayout())


def binary_image_config(image: BinaryImage, binary_name: str) -> ImageConfig:
    """The image config of ``image`` whose binary is ``/ko-app/<binary_name>``."""
    layout = binary_layout(image)
    return ImageConfig(
        entrypoint=(f"{KO_APP}/{binary_name}", *layout.args),
        user=layout.user,
        exposed_ports=layout.exposed_ports,
    )


def is_static(binary: Path) -> bool:
    """Whether an ELF executable asks for no program interpreter (a static binary)."""
    with open(binary, "rb") as elf:
        header = elf.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit ELF only
            raise ImageError(f"{binary} is not a 64-bit ELF executable")
        order = "<" if header[5] == 1 else ">"
        (phoff,) = struct.unpack_from(order + "Q", header, 0x20)
        phentsize, phnum = struct.unpack_from(order + "HH", header, 0x36)
        elf.seek(phoff)
        table = elf.read(phentsize * phnum)
    pt_interp = 3
    return all(struct.unpack_from(order + "I", table, i * phentsize)[0] != pt_interp for i in range(phnum))


def binary_rootfs(image: BinaryImage, binary: Path, rootfs: Path) -> None:
    """Lay out the root filesystem of ``image`` around ``binary`` in the (empty) folder ``rootfs``."""
    copy_file(rootfs, f"{KO_APP}/{binary.name}", binary, 0o755)
    add_ca_bundle(rootfs)
    add_zoneinfo(rootfs)
    write_accounts(rootfs, (ROOT, NONROOT))
    add_tmp(rootfs)
    for image_path, content in binary_layout(image).files:
        write_rootfs_file(rootfs, image_path, content)


def build_binary_image(image: BinaryImage, binary: Path, out_dir: Path) -> Path:
    """Build ``image`` around the static ``binary`` into ``out_dir``; return the tarball.

    A tarball built from the same binary, CA bundle and builder is reused as it is.
    """
    if not binary.is_file():
        raise MissingInputError(f"{image.ref}: binary {binary} is not built")
    if not is_static(binary):
        raise ImageError(f"{image.ref}: {binary} is dynamically linked; the image has no libc")
    tarball = tarball_path(out_dir, image.name, image.tag)
    digest = inputs_digest(
        [
            ("ref", image.ref.encode()),
            ("binary-name", binary.name.encode()),
            ("binary", binary),
            ("ca-bundle", HOST_CA_BUNDLE),
            ("zoneinfo", HOST_ZONEINFO / "tzdata.zi"),
            *builder_sources("binary", "rootfs", "ocipack"),
        ]
    )
    if is_fresh(tarball, digest):
        return tarball
    forget(tarball)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=f".{image.name}-") as work:
        rootfs = Path(work) / "rootfs"
        rootfs.mkdir()
        binary_rootfs(image, binary, rootfs)
        write_image(rootfs, tarball, image.ref, binary_image_config(image, binary.name))
    record(tarball, digest)
    return tarball
