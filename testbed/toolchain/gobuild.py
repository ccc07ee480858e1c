"""How a tool is built: a Go wrapper module in a temporary folder, ``go build`` per binary, copies.

``build_tool`` writes the wrapper module (``go.mod`` requiring the pinned modules, mirroring
k8s.io/kubernetes's staging replaces where needed, pinned ``go.sum`` lines, and our own ``.go``
files for a tool of ours), runs one ``go build`` per binary with the tool's build tags (reporting
to a :class:`~testbed.toolchain.progress.Progress` and recording how long each took), copies
module folders out of the module cache as ordinary writable files, then renames the temporary
folder into place: a tool folder appears only when its build finished. Builds run with
``CGO_ENABLED=0``, ``GOFLAGS=-mod=mod`` and ``GOTOOLCHAIN=local``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from testbed.toolchain import progress as build_progress
from testbed.toolchain.builds import GoBuild, ModuleCopy, steps
from testbed.toolchain.cache import timings_file
from testbed.toolchain.errors import ToolchainError
from testbed.toolchain.progress import Progress, Step, Ticker


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ToolchainError("the Go toolchain is needed to build the test bed's tools: no `go` on PATH")
    return go


def _run(args: list[str], cwd: Path, env: Mapping[str, str]) -> str:
    proc = subprocess.run(args, cwd=cwd, env=dict(env), capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolchainError(f"`{' '.join(args)}` failed in {cwd} (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def _staging_replaces(module: str, version: str, cwd: Path, env: Mapping[str, str]) -> list[str]:
    """The k8s.io modules that `module` replaces with ./staging paths, pinned to v0.<minor>."""
    info = json.loads(_run([_go(), "mod", "download", "-json", f"{module}@{version}"], cwd, env))
    gomod = Path(info["GoMod"]).read_text()
    staging = sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", gomod, re.M)))
    if not staging:
        raise ToolchainError(f"found no staging replace lines in {module}@{version}'s go.mod")
    staged = "v0." + ".".join(version.lstrip("v").split(".")[1:])
    return [f"\t{name} => {name} {staged}" for name in staging]


def _write_module(build: GoBuild, src: Path, env: Mapping[str, str]) -> None:
    src.mkdir()
    if build.source_dir is not None:
        for path in build.source_dir.iterdir():
            if path.suffix == ".go":
                shutil.copy(path, src / path.name)
    lines = [f"module kubeopera.local/tools/{build.name}", "", "go 1.24", ""]
    if build.requires:
        lines += ["require (", *(f"\t{mod} {ver}" for mod, ver in build.requires), ")"]
    lines += ["", *build.directives]
    if build.replace_staging_of:
        version = dict(build.requires)[build.replace_staging_of]
        lines += ["", "replace (", *_staging_replaces(build.replace_staging_of, version, src, env), ")"]
    (src / "go.mod").write_text("\n".join(lines) + "\n")
    if build.sums:
        (src / "go.sum").write_text("\n".join(build.sums) + "\n")


def _go_build(build: GoBuild, step: Step, src: Path, bin_dir: Path, env: Mapping[str, str]) -> None:
    package = dict(build.packages)[step.binary]
    flags = f"-s -w {build.ldflags}".strip()
    tags = ["-tags", ",".join(build.tags)] if build.tags else []
    _run([_go(), "build", "-trimpath", *tags, "-ldflags", flags, "-o", str(bin_dir / step.binary), package], src, env)


def build_tool(build: GoBuild, target: Path, progress: Progress) -> None:
    """Build every binary of ``build`` and its copies, then move the result to ``target``."""
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    work = Path(tempfile.mkdtemp(prefix=f".{build.name}-", dir=target.parent))
    try:
        src = work / "src"
        _write_module(build, src, env)
        for step in steps(build):
            progress.step_started(step)
            try:
                with Ticker(build_progress.TICK_SECONDS, progress.tick):
                    _go_build(build, step, src, work / "bin", env)
            except BaseException:
                progress.step_finished(failed=True)
                raise
            build_progress.record_timing(timings_file(), step.binary, progress.step_finished())
        _copy_from_modules(build.copies, work, src, env)
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _module_dir(module: str, version: str, cwd: Path, env: Mapping[str, str]) -> Path:
    """The module's folder in the module cache (downloaded if it is not there yet)."""
    info = json.loads(_run([_go(), "mod", "download", "-json", f"{module}@{version}"], cwd, env))
    return Path(info["Dir"])


def _copy_from_modules(copies: tuple[ModuleCopy, ...], work: Path, cwd: Path, env: Mapping[str, str]) -> None:
    for copy in copies:
        source = _module_dir(copy.module, copy.version, cwd, env) / copy.subdir
        if not source.is_dir():
            raise ToolchainError(f"{copy.module}@{copy.version} has no folder {copy.subdir!r} to copy")
        dest = work / copy.dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, dest, copy_function=shutil.copyfile)
        _make_writable(dest)


def _make_writable(folder: Path) -> None:
    """copytree copies the module cache's read-only folder modes; give the copy ordinary ones."""
    folder.chmod(0o755)
    for path in sorted(folder.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
