"""Packing a root filesystem folder into a single-layer OCI image-layout tarball, and reading one back.

No registry and no daemon: :func:`write_image` writes the layer, the image config, the manifest and
``index.json`` itself, in the layout ``ctr -n k8s.io image import`` takes. The index names the
image twice: ``io.containerd.image.name`` (the full reference: what containerd imports it as) and
``org.opencontainers.image.ref.name`` (the tag, as the image-layout spec has it).

The layer is an uncompressed tar (its digest is its diff_id), written in a fixed order (sorted
paths, a folder before what it holds) with every mtime 0 and no user or group names, so the same
folder gives the same bytes, hence the same digests, every time. Files belong to root unless the
files' own owners are kept (``keep_owners``, for a real distribution's root filesystem) or an
owner is set for a path and everything under it (``owners``: the function image's
``/home/app`` and ``/var/lib/kubeopera/helm`` belong to 65532).

:func:`read_image` reads a tarball back (checking every blob against its digest and size) and
:func:`extract_layer` unpacks its layer into a folder, as a container runtime would.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from testbed.images.errors import ImageError, MissingInputError

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
NAME_ANNOTATION = "io.containerd.image.name"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
CREATED = "1970-01-01T00:00:00Z"  # fixed: the same folder gives the same image
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Owner:
    """A numeric owner of files in the layer."""

    uid: int
    gid: int


@dataclass(frozen=True)
class ImageConfig:
    """What the image config says about running the image (its ``config`` object)."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = (f"PATH={DEFAULT_PATH}",)  # NAME=value, in order
    user: str = ""  # numeric, "uid" or "uid:gid"; empty: root
    working_dir: str = "/"
    exposed_ports: tuple[str, ...] = ()  # "8080/tcp"

    def document(self) -> dict[str, Any]:
        """The ``config`` object of the OCI image config (Docker's names, as containerd reads them)."""
        doc: dict[str, Any] = {"Env": list(self.env), "Entrypoint": list(self.entrypoint)}
        if self.cmd:
            doc["Cmd"] = list(self.cmd)
        if self.user:
            doc["User"] = self.user
        doc["WorkingDir"] = self.working_dir
        if self.exposed_ports:
            doc["ExposedPorts"] = {port: {} for port in self.exposed_ports}
        return doc

    def env_map(self) -> dict[str, str]:
        """The environment as a mapping (later entries win, as a runtime applies them)."""
        return dict(entry.partition("=")[::2] for entry in self.env)


@dataclass(frozen=True)
class PackedImage:
    """A written image-layout tarball: where it is, what it is called and its digests."""

    tarball: Path
    ref: str
    manifest_digest: str
    config_digest: str
    layer_digest: str
    layer_size: int


@dataclass(frozen=True)
class ImageLayout:
    """An image-layout tarball read back: the index, the one manifest and its config."""

    index: dict[str, Any]
    manifest: dict[str, Any]
    config: dict[str, Any]

    @property
    def ref(self) -> str:
        name: str = self.index["manifests"][0]["annotations"][NAME_ANNOTATION]
        return name

    @property
    def layer_digest(self) -> str:
        digest: str = self.manifest["layers"][0]["digest"]
        return digest


@dataclass(frozen=True)
class IndexEntry:
    """What an image-layout tarball's index says: the image's reference and manifest digest."""

    ref: str
    manifest_digest: str


def oci_platform() -> dict[str, str]:
    """This machine's platform in OCI terms: the binaries laid into images are built for it."""
    machine = platform.machine().lower()
    if machine not in _ARCHITECTURES:
        raise ImageError(f"no OCI architecture known for machine {machine!r}")
    return {"architecture": _ARCHITECTURES[machine], "os": "linux"}


def _tag(ref: str) -> str:
    """The tag of ``registry/name:tag`` (a ':' after the last '/')."""
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        raise ImageError(f"image reference {ref!r} has no tag")
    return last.rsplit(":", 1)[1]


def _walk(folder: Path, prefix: str = "") -> Iterator[tuple[str, Path]]:
    """Every entry under ``folder`` as (layer path, file), sorted, a folder before its content;
    symbolic links are entries, never followed."""
    with os.scandir(folder) as scan:
        entries = sorted(scan, key=lambda e: e.name)
    for entry in entries:
        name = prefix + entry.name
        yield name, Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path), name + "/")


def _owner_rules(rootfs: Path, owners: Mapping[str, Owner]) -> list[tuple[str, Owner]]:
    """The owner rules by layer path, longest first (the closest one wins); each path must exist."""
    rules: list[tuple[str, Owner]] = []
    for image_path, owner in owners.items():
        name = image_path.strip("/")
        if not name or not os.path.lexists(rootfs / name):
            raise MissingInputError(f"owner set for {image_path!r}, which is not in {rootfs}")
        rules.append((name, owner))
    return sorted(rules, key=lambda rule: len(rule[0]), reverse=True)


def _owner_of(name: str, rules: list[tuple[str, Owner]]) -> Owner | None:
    for prefix, owner in rules:
        if name == prefix or name.startswith(prefix + "/"):
            return owner
    return None


def _write_layer(rootfs: Path, out: IO[bytes], keep_owners: bool, owners: Mapping[str, Owner]) -> None:
    rules = _owner_rules(rootfs, owners)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as layer:
        for name, path in _walk(rootfs):
            info = layer.gettarinfo(str(path), arcname=name)
            if info is None:  # a socket: nothing a layer can hold
                raise ImageError(f"{path}: a socket cannot go into an image layer")
            info.mtime = 0
            info.uname = info.gname = ""
            if not keep_owners:
                info.uid = info.gid = 0
            owner = _owner_of(name, rules)
            if owner is not None:
                info.uid, info.gid = owner.uid, owner.gid
            if info.isreg():
                with open(path, "rb") as data:
                    layer.addfile(info, data)
            else:
                layer.addfile(info)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as data:
        while chunk := data.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _json(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _member(name: str, size: int, mode: int = 0o644, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type, info.mtime = size, mode, kind, 0
    return info


def write_image(
    rootfs: Path,
    tarball: Path,
    ref: str,
    config: ImageConfig,
    *,
    keep_owners: bool = False,
    owners: Mapping[str, Owner] | None = None,
) -> PackedImage:
    """Pack ``rootfs`` as the one layer of image ``ref`` (``registry/name:tag``) into ``tarball``.

    Files belong to root, or keep their owners on disk with ``keep_owners``; ``owners`` sets the
    owner of an image path (``"/home/app"``) and everything under it, the closest path winning.
    The tarball is written beside its final name and renamed into place when complete.
    """
    if not rootfs.is_dir():
        raise MissingInputError(f"root filesystem {rootfs} is not a folder")
    tag = _tag(ref)
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix=".ocipack-") as work:
        layer_path = Path(work) / "layer.tar"
        with open(layer_path, "wb") as out:
            _write_layer(rootfs, out, keep_owners, owners or {})
        layer_digest = _file_digest(layer_path)
        layer_size = layer_path.stat().st_size
        target = oci_platform()
        config_doc = {
            **target,
            "created": CREATED,
            "config": config.document(),
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created": CREATED, "created_by": "testbed.images.ocipack"}],
        }
        config_bytes = _json(config_doc)
        config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
        manifest = {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": len(config_bytes)},
            "layers": [{"mediaType": MEDIA_LAYER, "digest": layer_digest, "size": layer_size}],
        }
        manifest_bytes = _json(manifest)
        manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
        index = {
            "schemaVersion": 2,
            "mediaType": MEDIA_INDEX,
            "manifests": [
                {
                    "mediaType": MEDIA_MANIFEST,
                    "digest": manifest_digest,
                    "size": len(manifest_bytes),
                    "annotations": {NAME_ANNOTATION: ref, REF_NAME_ANNOTATION: tag},
                    "platform": target,
                }
            ],
        }
        partial = Path(work) / "image.tar"
        with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as out_tar:
            small = {
                "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
                "index.json": _json(index),
            }
            for name, data in small.items():
                out_tar.addfile(_member(name, len(data)), io.BytesIO(data))
            out_tar.addfile(_member("blobs", 0, 0o755, tarfile.DIRTYPE))
            out_tar.addfile(_member("blobs/sha256", 0, 0o755, tarfile.DIRTYPE))
            for digest, data in ((config_digest, config_bytes), (manifest_digest, manifest_bytes)):
                out_tar.addfile(_member(_blob_name(digest), len(data)), io.BytesIO(data))
            with open(layer_path, "rb") as layer_data:
                out_tar.addfile(_member(_blob_name(layer_digest), layer_size), layer_data)
        os.chmod(partial, 0o644)
        os.replace(partial, tarball)
    return PackedImage(tarball, ref, manifest_digest, config_digest, layer_digest, layer_size)


def _blob_name(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _blob(tar: tarfile.TarFile, descriptor: Mapping[str, Any]) -> IO[bytes]:
    """The blob a descriptor points to, checked against its size (its digest is the caller's)."""
    name = _blob_name(descriptor["digest"])
    try:
        member = tar.getmember(name)
    except KeyError:
        raise ImageError(f"{tar.name!s}: blob {name} is missing") from None
    if member.size != descriptor["size"]:
        raise ImageError(f"{tar.name!s}: {name} is {member.size} bytes, its descriptor says {descriptor['size']}")
    data = tar.extractfile(member)
    if data is None:
        raise ImageError(f"{tar.name!s}: {name} is not a file")
    return data


def _checked(tar: tarfile.TarFile, descriptor: Mapping[str, Any]) -> bytes:
    data = _blob(tar, descriptor).read()
    if "sha256:" + hashlib.sha256(data).hexdigest() != descriptor["digest"]:
        raise ImageError(f"{tar.name!s}: blob {descriptor['digest']} does not match its digest")
    return data


def read_index(tarball: Path) -> IndexEntry:
    """The reference and manifest digest of the one image in a tarball (reads ``index.json`` only)."""
    with tarfile.open(tarball, mode="r:") as tar:
        try:
            data = tar.extractfile("index.json")
        except KeyError:
            data = None
        if data is None:
            raise ImageError(f"{tarball}: no index.json")
        manifests = json.loads(data.read()).get("manifests") or []
    if len(manifests) != 1 or NAME_ANNOTATION not in manifests[0].get("annotations", {}):
        raise ImageError(f"{tarball}: index.json must name exactly one image ({NAME_ANNOTATION})")
    return IndexEntry(manifests[0]["annotations"][NAME_ANNOTATION], manifests[0]["digest"])


def read_image(tarball: Path) -> ImageLayout:
    """Read an image-layout tarball of one single-layer image back, checking every blob."""
    with tarfile.open(tarball, mode="r:") as tar:
        index_member = tar.extractfile("index.json")
        if index_member is None:
            raise ImageError(f"{tarball}: no index.json")
        index: dict[str, Any] = json.loads(index_member.read())
        manifests = index.get("manifests") or []
        if len(manifests) != 1:
            raise ImageError(f"{tarball}: {len(manifests)} manifests in index.json, expected 1")
        manifest: dict[str, Any] = json.loads(_checked(tar, manifests[0]))
        config: dict[str, Any] = json.loads(_checked(tar, manifest["config"]))
        (layer,) = manifest["layers"]
        h = hashlib.sha256()
        data = _blob(tar, layer)
        while chunk := data.read(_CHUNK):
            h.update(chunk)
        if "sha256:" + h.hexdigest() != layer["digest"]:
            raise ImageError(f"{tarball}: the layer does not match its digest {layer['digest']}")
        if config["rootfs"]["diff_ids"] != [layer["digest"]]:
            raise ImageError(f"{tarball}: the config's diff_ids do not name the (uncompressed) layer")
    return ImageLayout(index, manifest, config)


def extract_layer(tarball: Path, dest: Path) -> None:
    """Unpack the image's layer into ``dest`` with its modes and (when run as root) numeric owners."""
    layout = read_image(tarball)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball, mode="r:") as tar:
        data = _blob(tar, layout.manifest["layers"][0])
        with tarfile.open(fileobj=data, mode="r|") as layer:
            # Our own layer: modes (the sticky /tmp) and owners are meant as they are.
            layer.extractall(dest, numeric_owner=True, filter="fully_trusted")
