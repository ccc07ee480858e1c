"""Laying out an image's root filesystem folder: files, folders and links at image paths.

Every mode is given, never left to the umask, so a folder built twice packs to the same layer.
Besides the single entries: the accounts (``/etc/passwd`` and ``/etc/group``), the CA bundle
from this machine (``/etc/ssl/certs/ca-certificates.crt``, where Go and OpenSSL look) and a
world-writable sticky ``/tmp``. Owners are not set here but when packing
(:func:`testbed.images.ocipack.write_image`), so building needs no root.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.images.errors import ImageError, MissingInputError

HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
NOLOGIN = "/usr/sbin/nologin"


@dataclass(frozen=True)
class Account:
    """A user and its group of the same name and number."""

    name: str
    uid: int
    home: str
    shell: str = NOLOGIN

    @property
    def gid(self) -> int:
        return self.uid


ROOT = Account("root", 0, "/root", "/bin/sh")


def at(rootfs: Path, image_path: str) -> Path:
    """The file in ``rootfs`` for an absolute path in the image."""
    if not image_path.startswith("/") or ".." in Path(image_path).parts:
        raise ImageError(f"{image_path!r} is not an absolute path inside the image")
    return rootfs / image_path.lstrip("/")


def _make_parents(rootfs: Path, target: Path) -> None:
    """Create the missing folders above ``target`` (0755); leave existing ones as they are."""
    missing = [p for p in target.parents if p.is_relative_to(rootfs) and p != rootfs and not p.exists()]
    for folder in reversed(missing):
        folder.mkdir()
        os.chmod(folder, 0o755)


def make_dir(rootfs: Path, image_path: str, mode: int = 0o755) -> Path:
    """Create a folder of the image (missing parents 0755) or set the mode of an existing one."""
    target = at(rootfs, image_path)
    _make_parents(rootfs, target)
    target.mkdir(exist_ok=True)
    os.chmod(target, mode)
    return target


def write_file(rootfs: Path, image_path: str, data: bytes, mode: int = 0o644) -> Path:
    """Write a file of the image."""
    target = at(rootfs, image_path)
    _make_parents(rootfs, target)
    target.write_bytes(data)
    os.chmod(target, mode)
    return target


def copy_file(rootfs: Path, image_path: str, source: Path, mode: int | None = None) -> Path:
    """Copy a file of this machine (the file a link points to) into the image; keep its mode
    unless one is given."""
    if not source.is_file():
        raise MissingInputError(f"{source} is not a file")
    target = at(rootfs, image_path)
    _make_parents(rootfs, target)
    shutil.copyfile(source, target)
    os.chmod(target, mode if mode is not None else source.stat().st_mode & 0o7777)
    return target


def symlink(rootfs: Path, image_path: str, link_target: str) -> Path:
    """A symbolic link of the image; ``link_target`` is read inside the image."""
    link = at(rootfs, image_path)
    _make_parents(rootfs, link)
    link.symlink_to(link_target)
    return link


def write_accounts(rootfs: Path, accounts: Sequence[Account]) -> None:
    """``/etc/passwd`` and ``/etc/group`` with these users, each with a group of its own."""
    passwd = "".join(f"{a.name}:x:{a.uid}:{a.gid}:{a.name}:{a.home}:{a.shell}\n" for a in accounts)
    group = "".join(f"{a.name}:x:{a.gid}:\n" for a in accounts)
    write_file(rootfs, "/etc/passwd", passwd.encode())
    write_file(rootfs, "/etc/group", group.encode())


def add_ca_bundle(rootfs: Path, source: Path = HOST_CA_BUNDLE) -> None:
    """This machine's CA bundle at the path Go's crypto/x509 and Debian's OpenSSL read."""
    if not source.is_file():
        raise MissingInputError(f"no CA bundle at {source} (Debian: apt-get install ca-certificates)")
    copy_file(rootfs, CA_BUNDLE, source, 0o644)


HOST_ZONEINFO = Path("/usr/share/zoneinfo")


def add_zoneinfo(rootfs: Path, source: Path = HOST_ZONEINFO) -> None:
    """This machine's time zone database at ``/usr/share/zoneinfo``, as ko's (distroless) base
    images carry it: Go's ``time.LoadLocation`` reads it there, and Knative Eventing's webhook
    refuses a PingSource whose ``timezone`` it cannot load."""
    if not (source / "tzdata.zi").is_file():
        raise MissingInputError(f"no time zone database at {source} (Debian: apt-get install tzdata)")
    dest = at(rootfs, "/usr/share/zoneinfo")
    _make_parents(rootfs, dest)
    shutil.copytree(source, dest, symlinks=True)


def add_tmp(rootfs: Path) -> None:
    """``/tmp``, world-writable and sticky."""
    make_dir(rootfs, "/tmp", 0o1777)
