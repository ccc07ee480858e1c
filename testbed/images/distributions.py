"""The runtime's dependencies in the function image: the installed distributions that satisfy
its wheel's requirements, copied from the environment this runs in (there is no package index).

:func:`resolve_dependencies` finds the closure pip would install on this interpreter (markers
evaluated here, extras followed) and checks the installed versions satisfy the requirements;
:func:`copy_distribution` copies one file by file as its RECORD lists them. Console scripts
(``/usr/local/bin/gunicorn``...) are pointed at ``#!/usr/local/bin/python3.11``
(:func:`retarget_script`), their RECORD lines updated to match.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import sys
import tomllib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from testbed.images.errors import DependencyError
from testbed.images.interpreter import PREFIX, Interpreter
from testbed.images.rootfs import at, copy_file, write_file
from testbed.images.wheel import DIST_NAME, REPO


def project_requirements(repo: Path = REPO) -> list[str]:
    """The runtime's requirements, as its pyproject.toml (hence its wheel's metadata) lists them."""
    with open(repo / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)["project"]
    requirements: list[str] = project["dependencies"]
    return requirements


def _marker_holds(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in (extras or frozenset({""})))


def resolve_dependencies(requirements: Sequence[str]) -> list[metadata.Distribution]:
    """The installed distributions that satisfy ``requirements`` and, in turn, theirs; sorted by name.

    Raises DependencyError when one is missing, at a version a requirement rejects, or installed
    in editable mode (its files are elsewhere).
    """
    found: dict[str, metadata.Distribution] = {}
    extras_seen: dict[str, frozenset[str]] = {}
    pending: list[tuple[str, str]] = [("the wheel", r) for r in requirements]
    while pending:
        wanted_by, text = pending.pop()
        try:
            requirement = Requirement(text)
        except InvalidRequirement as err:
            raise DependencyError(f"{wanted_by}: cannot read requirement {text!r}: {err}") from err
        parent_extras = extras_seen.get(canonicalize_name(wanted_by), frozenset())
        if not _marker_holds(requirement, parent_extras):
            continue
        key = canonicalize_name(requirement.name)
        try:
            dist = found.get(key) or metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise DependencyError(
                f"{wanted_by} requires {text!r}, which is not installed in {sys.prefix} (run `make`)"
            ) from None
        if not requirement.specifier.contains(dist.version, prereleases=True):
            raise DependencyError(
                f"{wanted_by} requires {text!r}, but {dist.metadata['Name']} {dist.version} is installed"
                f" in {sys.prefix} (run `make`)"
            )
        extras = extras_seen.get(key, frozenset()) | frozenset(requirement.extras)
        if key in found and extras == extras_seen[key]:
            continue
        if key == canonicalize_name(DIST_NAME):
            raise DependencyError(f"{wanted_by} requires the runtime itself")
        direct_url = dist.read_text("direct_url.json")
        if direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"):
            raise DependencyError(f"{dist.metadata['Name']} is installed in editable mode; its files are elsewhere")
        found[key], extras_seen[key] = dist, extras
        pending.extend((key, r) for r in dist.requires or [])
    return [found[k] for k in sorted(found)]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def retarget_script(data: bytes, python: str) -> bytes | None:
    """A console script with its shebang pointing at ``python``, or None if it has no python one.

    Handles pip's two forms: ``#!<python>`` and, for a long interpreter path, ``#!/bin/sh`` followed
    by an ``'''exec' <python> "$0" "$@"`` line and a ``' '''`` line.
    """
    first, newline, rest = data.partition(b"\n")
    if not newline or not first.startswith(b"#!"):
        return None
    if first == b"#!/bin/sh" and rest.startswith(b"'''exec' "):
        lines = rest.split(b"\n", 2)
        if len(lines) < 3 or b"python" not in lines[0]:
            return None
        rest = lines[2]
    elif b"python" not in first:
        return None
    return b"#!" + python.encode() + b"\n" + rest


def _normal(path: str) -> Path:
    return Path(os.path.normpath(path))


def copy_distribution(dist: metadata.Distribution, rootfs: Path, interpreter: Interpreter) -> None:
    """Copy an installed distribution into the image's site-packages (and its scripts into
    ``/usr/local/bin``), file by file as its RECORD lists them, leaving bytecode out; write its
    RECORD anew for what was copied."""
    site = Path(str(dist.locate_file("")))
    env_prefix = Path(sys.prefix)
    files = dist.files
    if files is None:
        raise DependencyError(f"{dist.metadata['Name']} {dist.version} has no RECORD; cannot copy it")
    rows: list[list[str]] = []
    record_name = ""
    for entry in files:
        parts = PurePosixPath(str(entry)).parts
        if entry.suffix == ".pyc" or "__pycache__" in parts:
            continue
        source = _normal(str(site / str(entry)))
        if source.is_relative_to(site):
            image_path = f"{interpreter.image_site_packages}/{source.relative_to(site).as_posix()}"
        elif source.is_relative_to(env_prefix):
            image_path = f"{PREFIX}/{source.relative_to(env_prefix).as_posix()}"
        else:
            raise DependencyError(f"{dist.metadata['Name']}: {entry} is outside {env_prefix}")
        if parts[-1] == "RECORD" and parts[0].endswith(".dist-info"):
            record_name = image_path
            continue
        if not source.is_file():
            raise DependencyError(f"{dist.metadata['Name']}: {source} is in its RECORD but not installed")
        target = copy_file(rootfs, image_path, source)
        data: bytes | None = None
        if image_path.startswith(f"{PREFIX}/bin/"):
            data = retarget_script(target.read_bytes(), interpreter.image_executable)
            if data is not None:
                target.write_bytes(data)
        if data is None and entry.hash is not None:
            rows.append([str(entry), f"{entry.hash.mode}={entry.hash.value}", str(entry.size)])
        else:
            content = target.read_bytes()
            rows.append([str(entry), _record_hash(content), str(len(content))])
    if not record_name:
        raise DependencyError(f"{dist.metadata['Name']}: its RECORD does not list itself")
    rows.append([str(PurePosixPath(record_name).relative_to(interpreter.image_site_packages)), "", ""])
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    write_file(rootfs, record_name, text.getvalue().encode())


def retarget_installed_scripts(rootfs: Path, interpreter: Interpreter) -> None:
    """Point the scripts pip installed into ``/usr/local/bin`` at the image's interpreter and
    update their RECORD lines (pip wrote the shebang of the python it ran on)."""
    site = at(rootfs, interpreter.image_site_packages)
    for record_file in sorted(site.glob("*.dist-info/RECORD")):
        rows = list(csv.reader(io.StringIO(record_file.read_text())))
        for row in rows:
            target = _normal(str(site / row[0]))
            if target.parent != at(rootfs, f"{PREFIX}/bin") or not target.is_file():
                continue
            data = retarget_script(target.read_bytes(), interpreter.image_executable)
            if data is not None:
                target.write_bytes(data)
                row[1:3] = [_record_hash(data), str(len(data))]
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        record_file.write_text(text.getvalue())
