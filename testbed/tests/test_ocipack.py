"""The OCI image-layout tarballs of testbed.images.ocipack, on small folders: the index, manifest
and config agree with each other and with the blobs' digests, the layer holds the folder in a
fixed order with mtimes 0 and the owners asked for, and the same folder always packs to the same
bytes. Also the binary images' layout (testbed.images.binary) on a stand-in static ELF file."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import struct
import tarfile
from pathlib import Path
from typing import Any

import pytest

from testbed.images import (
    COREDNS,
    NONROOT_UID,
    PAUSE,
    SERVING_IMAGES,
    ImageConfig,
    ImageError,
    IndexEntry,
    MissingInputError,
    Owner,
    binary_image_config,
    build_binary_image,
    extract_layer,
    read_image,
    read_index,
    write_image,
)
from testbed.images.ocipack import MEDIA_CONFIG, MEDIA_LAYER, MEDIA_MANIFEST, NAME_ANNOTATION, REF_NAME_ANNOTATION

REF = "kubeopera.local/sample:v1"
CONFIG = ImageConfig(
    entrypoint=("/app/run", "--flag"),
    cmd=("serve",),
    env=("PATH=/usr/bin:/bin", "GREETING=hello=world"),
    user="65532:65532",
    working_dir="/home/app",
    exposed_ports=("8080/tcp",),
)


def make_rootfs(root: Path) -> Path:
    """A small root filesystem: folders, an executable, a symlink, a hard link, a sticky /tmp."""
    for folder in ("app", "etc", "home/app/cache", "tmp", "var/lib/data"):
        (root / folder).mkdir(parents=True)
    (root / "app" / "run").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "app" / "run", 0o755)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    os.chmod(root / "etc" / "passwd", 0o644)
    (root / "home" / "app" / "cache" / "entry").write_bytes(b"cached")
    (root / "var" / "lib" / "data" / "blob").write_bytes(bytes(range(256)) * 64)
    os.link(root / "var" / "lib" / "data" / "blob", root / "var" / "lib" / "data" / "blob-again")
    (root / "app" / "current").symlink_to("run")
    os.chmod(root / "tmp", 0o1777)
    return root


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    return make_rootfs(tmp_path / "rootfs")


def outer_members(tarball: Path) -> dict[str, bytes]:
    with tarfile.open(tarball) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else b"") for m in tar}  # type: ignore[union-attr]


def layer_members(tarball: Path) -> list[tarfile.TarInfo]:
    layout = read_image(tarball)
    blob = outer_members(tarball)["blobs/sha256/" + layout.layer_digest.split(":")[1]]
    with tarfile.open(fileobj=io.BytesIO(blob)) as layer:
        return layer.getmembers()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_index_manifest_config_and_blobs_agree(rootfs: Path, tmp_path: Path) -> None:
    packed = write_image(rootfs, tmp_path / "out" / "image.tar", REF, CONFIG)
    members = outer_members(packed.tarball)
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}

    index: dict[str, Any] = json.loads(members["index.json"])
    (descriptor,) = index["manifests"]
    assert descriptor["mediaType"] == MEDIA_MANIFEST
    assert descriptor["annotations"] == {NAME_ANNOTATION: REF, REF_NAME_ANNOTATION: "v1"}
    assert descriptor["platform"]["os"] == "linux"
    manifest_bytes = members["blobs/sha256/" + descriptor["digest"].split(":")[1]]
    assert sha256(manifest_bytes) == descriptor["digest"] == packed.manifest_digest
    assert len(manifest_bytes) == descriptor["size"]

    manifest = json.loads(manifest_bytes)
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == MEDIA_MANIFEST
    assert manifest["config"]["mediaType"] == MEDIA_CONFIG
    config_bytes = members["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]]
    assert sha256(config_bytes) == manifest["config"]["digest"] == packed.config_digest
    assert len(config_bytes) == manifest["config"]["size"]
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == MEDIA_LAYER
    layer_bytes = members["blobs/sha256/" + layer["digest"].split(":")[1]]
    assert sha256(layer_bytes) == layer["digest"] == packed.layer_digest
    assert len(layer_bytes) == layer["size"] == packed.layer_size

    config = json.loads(config_bytes)
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer["digest"]]}  # uncompressed layer
    platform = descriptor["platform"]
    assert (config["os"], config["architecture"]) == (platform["os"], platform["architecture"])
    assert set(members) == {
        "oci-layout",
        "index.json",
        "blobs",
        "blobs/sha256",
        *(f"blobs/sha256/{d.split(':')[1]}" for d in (packed.manifest_digest, packed.config_digest)),
        f"blobs/sha256/{packed.layer_digest.split(':')[1]}",
    }
    assert read_image(packed.tarball).ref == REF
    assert read_index(packed.tarball) == IndexEntry(REF, packed.manifest_digest)


def test_config_says_how_to_run_the_image(rootfs: Path, tmp_path: Path) -> None:
    packed = write_image(rootfs, tmp_path / "image.tar", REF, CONFIG)
    config = read_image(packed.tarball).config["config"]
    assert config == {
        "Entrypoint": ["/app/run", "--flag"],
        "Cmd": ["serve"],
        "Env": ["PATH=/usr/bin:/bin", "GREETING=hello=world"],
        "User": "65532:65532",
        "WorkingDir": "/home/app",
        "ExposedPorts": {"8080/tcp": {}},
    }
    assert CONFIG.env_map() == {"PATH": "/usr/bin:/bin", "GREETING": "hello=world"}
    minimal = ImageConfig(entrypoint=("/pause",)).document()
    assert set(minimal) == {"Entrypoint", "Env", "WorkingDir"}  # root, no Cmd, no ports


def test_layer_holds_the_folder_in_a_fixed_order(rootfs: Path, tmp_path: Path) -> None:
    members = layer_members(write_image(rootfs, tmp_path / "image.tar", REF, CONFIG).tarball)
    names = [m.name for m in members]
    assert names == [
        "app",
        "app/current",
        "app/run",
        "etc",
        "etc/passwd",
        "home",
        "home/app",
        "home/app/cache",
        "home/app/cache/entry",
        "tmp",
        "var",
        "var/lib",
        "var/lib/data",
        "var/lib/data/blob",
        "var/lib/data/blob-again",
    ]
    by_name = {m.name: m for m in members}
    assert all(m.mtime == 0 and m.uname == "" and m.gname == "" for m in members)
    assert by_name["app/run"].mode == 0o755 and by_name["app/run"].isreg()
    assert by_name["etc/passwd"].mode == 0o644
    assert by_name["tmp"].mode == 0o1777 and by_name["tmp"].isdir()
    assert by_name["app/current"].issym() and by_name["app/current"].linkname == "run"
    assert by_name["var/lib/data/blob-again"].islnk()
    assert by_name["var/lib/data/blob-again"].linkname == "var/lib/data/blob"


def test_files_belong_to_root_unless_an_owner_is_set(rootfs: Path, tmp_path: Path) -> None:
    app = Owner(NONROOT_UID, NONROOT_UID)
    owners = {"/home/app": app, "/var/lib/data/blob": Owner(7, 8)}
    members = layer_members(write_image(rootfs, tmp_path / "image.tar", REF, CONFIG, owners=owners).tarball)
    owned = {m.name: (m.uid, m.gid) for m in members}
    for name in ("home/app", "home/app/cache", "home/app/cache/entry"):
        assert owned[name] == (NONROOT_UID, NONROOT_UID), name
    assert owned["var/lib/data/blob"] == (7, 8)
    rest = {name: ids for name, ids in owned.items() if not name.startswith("home/app") and name != "var/lib/data/blob"}
    assert set(rest.values()) == {(0, 0)}


def test_keep_owners_keeps_the_owners_on_disk(rootfs: Path, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        os.chown(rootfs / "etc" / "passwd", 1234, 4321, follow_symlinks=False)
        expected = (1234, 4321)
    else:
        expected = (os.getuid(), os.getgid())
    packed = write_image(rootfs, tmp_path / "image.tar", REF, CONFIG, keep_owners=True, owners={"/app": Owner(5, 5)})
    owned = {m.name: (m.uid, m.gid) for m in layer_members(packed.tarball)}
    assert owned["etc/passwd"] == expected
    assert owned["app/run"] == (5, 5)  # an owner set for a path still wins


def test_an_owner_for_a_path_not_in_the_folder_is_an_error(rootfs: Path, tmp_path: Path) -> None:
    with pytest.raises(MissingInputError, match="/home/nobody"):
        write_image(rootfs, tmp_path / "image.tar", REF, CONFIG, owners={"/home/nobody": Owner(1, 1)})


def test_the_same_folder_packs_to_the_same_bytes(rootfs: Path, tmp_path: Path) -> None:
    first = write_image(rootfs, tmp_path / "a.tar", REF, CONFIG)
    os.utime(rootfs / "app" / "run", (1_700_000_000, 1_700_000_000))  # mtimes do not count
    second = write_image(rootfs, tmp_path / "b.tar", REF, CONFIG)
    assert first.tarball.read_bytes() == second.tarball.read_bytes()
    assert (first.manifest_digest, first.layer_digest) == (second.manifest_digest, second.layer_digest)
    (rootfs / "etc" / "passwd").write_text("changed\n")
    third = write_image(rootfs, tmp_path / "c.tar", REF, CONFIG)
    assert third.layer_digest != first.layer_digest


def test_a_reference_needs_a_tag(rootfs: Path, tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="no tag"):
        write_image(rootfs, tmp_path / "image.tar", "kubeopera.local:5000/sample", CONFIG)


def test_a_tampered_blob_is_found_out(rootfs: Path, tmp_path: Path) -> None:
    packed = write_image(rootfs, tmp_path / "image.tar", REF, CONFIG)
    members = outer_members(packed.tarball)
    config_name = "blobs/sha256/" + packed.config_digest.split(":")[1]
    members[config_name] = members[config_name].replace(b"65532:65532", b"00000:00000")
    tampered = tmp_path / "tampered.tar"
    with tarfile.open(tampered, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ImageError, match="does not match its digest"):
        read_image(tampered)


def test_extract_layer_restores_the_folder(rootfs: Path, tmp_path: Path) -> None:
    packed = write_image(rootfs, tmp_path / "image.tar", REF, CONFIG)
    out = tmp_path / "extracted"
    extract_layer(packed.tarball, out)
    assert (out / "app" / "run").read_text() == "#!/bin/sh\necho hi\n"
    assert stat.S_IMODE((out / "tmp").stat().st_mode) == 0o1777
    assert os.readlink(out / "app" / "current") == "run"
    assert (out / "var" / "lib" / "data" / "blob-again").read_bytes() == bytes(range(256)) * 64


# --- the binary images, around a stand-in static executable ---------------------------------


def fake_elf(path: Path, interpreter: bool = False) -> Path:
    """A 64-bit little-endian ELF header with no program header, or one PT_INTERP (dynamic)."""
    phnum = 1 if interpreter else 0
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0x400000, 64, 0, 0, 64, 56, phnum, 0, 0, 0)
    table = struct.pack("<IIQQQQQQ", 3, 4, 120, 0, 0, 28, 28, 1) if interpreter else b""
    path.write_bytes(header + table + b"/lib64/ld-linux-x86-64.so.2\0")
    os.chmod(path, 0o755)
    return path


def test_a_knative_image_runs_its_binary_as_nonroot(tmp_path: Path) -> None:
    image = SERVING_IMAGES["queue"]
    tarball = build_binary_image(image, fake_elf(tmp_path / "queue"), tmp_path / "images")
    layout = read_image(tarball)
    assert layout.ref == image.ref == "kubeopera.local/kn-serving-queue:" + image.tag
    assert layout.config["config"]["Entrypoint"] == ["/ko-app/queue"]
    assert layout.config["config"]["User"] == str(NONROOT_UID)
    members = {m.name: m for m in layer_members(tarball)}
    assert members["ko-app/queue"].mode == 0o755
    assert members["tmp"].mode == 0o1777
    assert {"etc/ssl/certs/ca-certificates.crt", "etc/passwd", "etc/group"} <= set(members)
    out = tmp_path / "extracted"
    extract_layer(tarball, out)
    assert f"nonroot:x:{NONROOT_UID}:{NONROOT_UID}:" in (out / "etc" / "passwd").read_text()
    assert (out / "etc" / "group").read_text() == f"root:x:0:\nnonroot:x:{NONROOT_UID}:\n"
    assert (out / "etc/ssl/certs/ca-certificates.crt").read_bytes() == Path(
        "/etc/ssl/certs/ca-certificates.crt"
    ).read_bytes()


def test_a_binary_image_is_built_once(tmp_path: Path) -> None:
    binary = fake_elf(tmp_path / "pause")
    first = build_binary_image(PAUSE, binary, tmp_path / "images")
    built = first.stat().st_mtime_ns
    assert build_binary_image(PAUSE, binary, tmp_path / "images").stat().st_mtime_ns == built
    binary.write_bytes(binary.read_bytes() + b"changed")
    assert build_binary_image(PAUSE, binary, tmp_path / "images").stat().st_mtime_ns != built


def test_coredns_runs_as_root_with_its_corefile(tmp_path: Path) -> None:
    config = binary_image_config(COREDNS, "coredns")
    assert config.entrypoint == ("/ko-app/coredns", "-conf", "/etc/coredns/Corefile")
    assert config.user == ""
    tarball = build_binary_image(COREDNS, fake_elf(tmp_path / "coredns"), tmp_path / "images")
    out = tmp_path / "extracted"
    extract_layer(tarball, out)
    corefile = (out / "etc" / "coredns" / "Corefile").read_text()
    for line in ("kubernetes cluster.local in-addr.arpa ip6.arpa", "health :8080", "ready :8181", "errors", "cache 30"):
        assert line in corefile
    assert "forward" not in corefile and "loop" not in corefile


def test_a_dynamic_binary_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="dynamically linked"):
        build_binary_image(PAUSE, fake_elf(tmp_path / "pause", interpreter=True), tmp_path / "images")
    with pytest.raises(MissingInputError):
        build_binary_image(PAUSE, tmp_path / "missing", tmp_path / "images")
