"""Where the built tools live: the cache outside the clone, a tool's folder in it, and its lock.

Layout: ``$KUBEOPERA_TOOLS_CACHE`` (default ``$XDG_CACHE_HOME/kubeopera-tenants``, else
``~/.cache/kubeopera-tenants``) ``/tools/<name>-<version>/bin/<binary>`` (and
``/tools/<name>-<version>/config/...``); a tool built from a source folder of our own adds a digest
of that folder to its name. A tool folder counts only when it holds every binary and copy
(``is_complete``). ``lock`` serialises builds across processes; ``timings.json`` beside ``tools/``
keeps how long each step took (:mod:`.progress`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.toolchain import progress as build_progress
from testbed.toolchain.builds import GoBuild


def cache_root() -> Path:
    """Where tools, their sources and the lock live; outside the clone."""
    configured = os.environ.get("KUBEOPERA_TOOLS_CACHE")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "kubeopera-tenants"


def tool_dir(build: GoBuild) -> Path:
    """The tool's folder in the cache (whether or not it is built yet)."""
    digest = ""
    if build.source_dir is not None:
        digest = "-" + _source_digest(build.source_dir)
    return cache_root() / "tools" / f"{build.name}-{build.version}{digest}"


def _source_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(folder).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def is_complete(build: GoBuild, target: Path) -> bool:
    """Whether ``target`` holds every binary and every module copy of the tool."""
    return all((target / "bin" / b).is_file() for b in build.binaries) and all(
        (target / copy.dest).is_dir() for copy in build.copies
    )


def timings_file() -> Path:
    return cache_root() / build_progress.TIMINGS_FILE


@contextmanager
def lock() -> Iterator[None]:
    """Hold the cache's lock file: one process builds at a time."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
