"""Importing image tarballs into a containerd with ``ctr``, and listing what it holds.

Every ``ctr`` call has a connection timeout (``--connect-timeout``) and runs under a timeout of
its own: ``ctr`` against a socket nobody listens on waits forever (the prototype lost ten minutes
to ``ctr version`` that way). Images go into the ``k8s.io`` namespace, the CRI plugin's, where the
kubelet finds them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from testbed.images import command
from testbed.images.errors import CommandError, MissingInputError
from testbed.images.ocipack import read_index

NAMESPACE = "k8s.io"
CONNECT_TIMEOUT = "5s"
IMPORT_TIMEOUT = 300.0  # one tarball; the largest (Traefik, the function image) are ~200 MB
QUERY_TIMEOUT = 30.0


def ctr_command(ctr: Path | str, socket: Path, namespace: str = NAMESPACE) -> list[str]:
    """The start of every ``ctr`` command line for the containerd at ``socket``."""
    return [
        os.fspath(ctr),
        "--address",
        os.fspath(socket),
        "--connect-timeout",
        CONNECT_TIMEOUT,
        "--namespace",
        namespace,
    ]


def import_images(
    ctr: Path | str,
    socket: Path,
    tarballs: Iterable[Path],
    *,
    namespace: str = NAMESPACE,
    timeout: float = IMPORT_TIMEOUT,
    skip_present: bool = True,
) -> list[str]:
    """``ctr image import`` each tarball (an OCI image layout naming its image) into containerd,
    one after another (each unpacks its layer into the snapshotter); return the references imported.

    With ``skip_present``, a tarball whose image containerd already holds under the same reference
    and manifest digest is not imported again (that would read and hash it all, ~7 s for the
    function image, to change nothing).
    """
    present = image_digests(ctr, socket, namespace=namespace) if skip_present else {}
    imported: list[str] = []
    for tarball in tarballs:
        if not tarball.is_file():
            raise MissingInputError(f"image tarball {tarball} is not there")
        entry = read_index(tarball)
        if present.get(entry.ref) == entry.manifest_digest:
            continue
        command.run([*ctr_command(ctr, socket, namespace), "image", "import", tarball], timeout=timeout)
        imported.append(entry.ref)
    return imported


def image_digests(ctr: Path | str, socket: Path, *, namespace: str = NAMESPACE) -> dict[str, str]:
    """The images containerd holds in ``namespace``: reference -> the digest of its manifest
    (``ctr image ls``: REF TYPE DIGEST SIZE PLATFORMS LABELS)."""
    output = command.run([*ctr_command(ctr, socket, namespace), "image", "ls"], timeout=QUERY_TIMEOUT)
    digests: dict[str, str] = {}
    for line in output.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2].startswith("sha256:"):
            digests[fields[0]] = fields[2]
    return digests


def image_refs(ctr: Path | str, socket: Path, *, namespace: str = NAMESPACE) -> list[str]:
    """The references of the images containerd holds in ``namespace``, sorted."""
    output = command.run([*ctr_command(ctr, socket, namespace), "image", "ls", "-q"], timeout=QUERY_TIMEOUT)
    return sorted(line.strip() for line in output.splitlines() if line.strip())


def wait_for_containerd(ctr: Path | str, socket: Path, timeout: float = 30.0) -> None:
    """Wait until containerd answers ``ctr version`` on ``socket`` (each try bounded too)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            command.run([*ctr_command(ctr, socket), "version"], timeout=10.0)
            return
        except CommandError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
