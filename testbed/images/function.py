"""The function image (:data:`~testbed.images.catalog.FUNCTION_IMAGE`): the project's wheel in the
Dockerfile's layout, built here without docker.

What the Dockerfile's last stage makes, the way it makes it (:func:`function_image_config` is that
stage's ENV, USER, WORKDIR, EXPOSE and ENTRYPOINT; tests/deploy checks the two agree):

- CPython 3.11 as python:3.11-slim lays it out: ``/usr/local/bin/python3.11`` (and ``python3``,
  ``python``), the standard library in ``/usr/local/lib/python3.11``, packages in its
  ``site-packages``, ``libpython3.11.so.1.0`` in ``/usr/local/lib``. The interpreter is this
  process's own base installation (:func:`current_interpreter`; for the project's venv, pyenv's
  3.11.7): a plain CPython build finds its prefix from where its executable is (the landmark
  ``lib/python3.11/os.py``), so moved under ``/usr/local`` it runs as it ran. Debian's
  ``/usr/bin/python3.11`` would not do: its ``site`` module looks in ``dist-packages``, not in
  ``site-packages``. The build is ``--enable-shared`` and its RUNPATH names its build prefix,
  which the image has not; the loader finds the library through a link from its first search
  folder (libc's), python:slim's ld.so.cache being out of reach without running ``ldconfig``.
  Left out: tests (``test``/``tests``/``idle_test`` folders and the ``_test*`` modules),
  ``idlelib``, ``tkinter``, ``turtledemo``, ``ensurepip``, ``lib2to3``, the static library's
  ``config-3.11-*`` folder and this machine's bytecode.
- Bytecode, compiled for the image's paths (``compileall -d``) as unchecked-hash ``.pyc``
  (the image never changes, and every mtime in the layer is 0), for the standard library and the
  packages (``bytecode=False`` leaves it out). The Dockerfile's ``pip install`` compiles the
  packages too; as the root filesystem is read-only and ``PYTHONDONTWRITEBYTECODE`` is set,
  without it every worker would compile what it imports: measured in a chroot, importing the
  functions' modules took 2.4 s without bytecode, 1.5 s with the packages' and 0.67 s with all
  (+15 MB for the standard library, +70 MB for the packages; about 20 s more to build).
- Every shared library ``ldd`` names for the interpreter, the C modules of the standard library
  and of the packages, and ``/bin/sh`` (pyhelm3 runs helm through a shell, as
  ``create_subprocess_shell``), at the path ``ldd`` found it, plus the loader.
- The runtime wheel, built as the Dockerfile's ``wheel`` stage builds it (its sources,
  :data:`WHEEL_SOURCES`, copied to a scratch folder, then ``pip wheel --no-deps``), and installed
  by pip (``--root <rootfs> --prefix /usr/local``). Its dependencies cannot be downloaded here (no
  package index): they are copied from the environment this runs in, file by file as each
  distribution's RECORD lists them, after checking that the installed versions satisfy the
  wheel's requirements (:func:`resolve_dependencies`). The dependency closure is the one pip
  would install on this interpreter (markers evaluated here, extras followed).
- Console scripts (``/usr/local/bin/gunicorn``...) start with ``#!/usr/local/bin/python3.11``;
  their RECORD lines are updated to match.
- helm (the test bed's, :attr:`testbed.toolchain.Toolchain.helm`) at ``/usr/local/bin/helm``.
- ``/etc/passwd`` and ``/etc/group`` with root and ``app`` (65532), ``/etc/nsswitch.conf``, the
  CA bundle (and OpenSSL's ``cert.pem``/``certs`` links to it, as Debian has them), ``/tmp``
  (1777), ``/home/app`` and ``/var/lib/kubeopera/helm`` owned by 65532.

:func:`build_function_image` caches the tarball by the digest of its inputs: the wheel's sources,
the interpreter, every dependency (name, version and RECORD), helm, the shell, the CA bundle and
these modules; a second build with nothing changed only computes that digest (well under a second
plus the dependency check).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import ssl
import sys
import sysconfig
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from testbed.images import command
from testbed.images.cache import builder_sources, forget, inputs_digest, is_fresh, record, tarball_path
from testbed.images.catalog import FUNCTION_IMAGE, NONROOT_UID
from testbed.images.errors import DependencyError, ImageError, InterpreterError, MissingInputError
from testbed.images.ocipack import ImageConfig, Owner, write_image
from testbed.images.rootfs import (
    CA_BUNDLE,
    HOST_CA_BUNDLE,
    ROOT,
    Account,
    add_ca_bundle,
    add_tmp,
    at,
    copy_file,
    make_dir,
    symlink,
    write_accounts,
    write_file,
)

REPO = Path(__file__).resolve().parents[2]
# What the Dockerfile's `wheel` stage copies into its build folder (tests/deploy checks they agree).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "shared", "functions")
DIST_NAME = "kubeopera-tenants"

PREFIX = "/usr/local"
APP = Account("app", NONROOT_UID, "/home/app")
APP_OWNER = Owner(APP.uid, APP.gid)
HELM_HOME = "/var/lib/kubeopera/helm"
# python:3.11-slim's PATH: Debian's with /usr/local/bin put in front once more.
SLIM_PATH = "/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The environment of the Dockerfile's last stage: python:3.11-slim's PATH and LANG, then its ENV.
FUNCTION_ENV: tuple[tuple[str, str], ...] = (
    ("PATH", SLIM_PATH),
    ("LANG", "C.UTF-8"),
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTHONUNBUFFERED", "1"),
    ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    ("HOME", APP.home),
    ("PORT", "8080"),
    ("HELM_CACHE_HOME", f"{HELM_HOME}/cache"),
    ("HELM_CONFIG_HOME", f"{HELM_HOME}/config"),
    ("HELM_DATA_HOME", f"{HELM_HOME}/data"),
    ("CHART_CACHE_DIR", f"{HELM_HOME}/charts"),
)
ENTRYPOINT = ("gunicorn", "-c", "python:functions.gunicorn_conf")
NSSWITCH = b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"

# Left out of the standard library: folders anywhere, folders at its top, C modules by prefix.
_SKIP_ANYWHERE = frozenset({"__pycache__", "test", "tests", "idle_test"})
_SKIP_TOP = frozenset({"idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages"})
_SKIP_DYNLOAD = ("_test", "_ctypes_test", "_tkinter", "xxlimited", "_xxtestfuzz")
_LDD_BATCH = 64
_PIP_TIMEOUT = 600.0


def function_image_config() -> ImageConfig:
    """The function image's config, as the Dockerfile's last stage sets it (no build needed)."""
    return ImageConfig(
        entrypoint=ENTRYPOINT,
        env=tuple(f"{name}={value}" for name, value in FUNCTION_ENV),
        user=f"{APP.uid}:{APP.gid}",  # numeric, so that the kubelet can verify runAsNonRoot
        working_dir=APP.home,
        exposed_ports=("8080/tcp",),
    )


# --- the interpreter ------------------------------------------------------------------------


@dataclass(frozen=True)
class Interpreter:
    """A CPython installation that can be moved under ``/usr/local``: ``<prefix>/bin/pythonX.Y``,
    ``<prefix>/lib/pythonX.Y`` and, for a shared build, ``<prefix>/lib/<libpython>``."""

    prefix: Path
    version: str  # "3.11"
    libpython: str | None  # "libpython3.11.so.1.0" for a --enable-shared build

    @property
    def executable(self) -> Path:
        return self.prefix / "bin" / f"python{self.version}"

    @property
    def stdlib(self) -> Path:
        return self.prefix / "lib" / f"python{self.version}"

    @property
    def image_executable(self) -> str:
        return f"{PREFIX}/bin/python{self.version}"

    @property
    def image_site_packages(self) -> str:
        return f"{PREFIX}/lib/python{self.version}/site-packages"


def current_interpreter() -> Interpreter:
    """This process's base CPython (the venv's ``home``), checked to be movable."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if version != "3.11":
        raise InterpreterError(f"the image runs Python 3.11 (python:3.11-slim), this is {version}")
    patched = {"posix_local", "deb_system"} & set(sysconfig.get_scheme_names())
    if patched:
        raise InterpreterError(
            f"{sys.base_prefix} is a distribution's patched build (install schemes {sorted(patched)}; its"
            " site module looks in dist-packages), which cannot be laid out as python:slim's; run from"
            " a venv of a plain CPython (pyenv's)"
        )
    shared = bool(sysconfig.get_config_var("Py_ENABLE_SHARED"))
    interpreter = Interpreter(
        Path(sys.base_prefix), version, str(sysconfig.get_config_var("INSTSONAME")) if shared else None
    )
    needed = [interpreter.executable, interpreter.stdlib / "os.py"]
    if interpreter.libpython:
        needed.append(interpreter.prefix / "lib" / interpreter.libpython)
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise InterpreterError(f"{interpreter.prefix} is not a CPython installation: no {', '.join(missing)}")
    return interpreter


# --- the dependencies -----------------------------------------------------------------------


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


# --- the wheel ------------------------------------------------------------------------------


def _source_files(repo: Path) -> Iterator[Path]:
    """The files of the wheel's sources, sorted, without bytecode."""
    for name in WHEEL_SOURCES:
        source = repo / name
        if source.is_file():
            yield source
        elif source.is_dir():
            yield from sorted(
                p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            )
        else:
            raise MissingInputError(f"{source} (a source of the wheel) is missing")


def build_wheel(repo: Path, work: Path) -> Path:
    """Build the runtime wheel as the Dockerfile's ``wheel`` stage does: its sources copied into a
    scratch folder, then ``pip wheel --no-deps`` (no build isolation: no package index here)."""
    src = work / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in WHEEL_SOURCES:
        if (repo / name).is_dir():
            shutil.copytree(repo / name, src / name, ignore=ignore)
        else:
            shutil.copyfile(repo / name, src / name)
    wheels = work / "wheels"
    command.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            wheels,
            src,
        ],
        timeout=_PIP_TIMEOUT,
    )
    built = sorted(wheels.glob("kubeopera_tenants-*.whl"))
    if len(built) != 1:
        raise ImageError(f"pip wheel made {[p.name for p in built]}, expected one kubeopera_tenants wheel")
    return built[0]


def install_wheel(wheel: Path, rootfs: Path) -> None:
    """``pip install`` the wheel alone into the image's ``/usr/local``."""
    command.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--ignore-installed",
            "--no-warn-script-location",
            "--root",
            rootfs,
            "--prefix",
            PREFIX,
            wheel,
        ],
        timeout=_PIP_TIMEOUT,
    )


# --- the standard library and the shared libraries -------------------------------------------


def _stdlib_ignore(stdlib: Path) -> Callable[[str, list[str]], set[str]]:
    dynload = stdlib / "lib-dynload"

    def ignore(folder: str, names: list[str]) -> set[str]:
        here = Path(folder)
        skipped = {n for n in names if n in _SKIP_ANYWHERE or n.endswith(".pyc")}
        if here == stdlib:
            skipped |= {n for n in names if n in _SKIP_TOP or n.startswith("config-")}
        if here == dynload:
            skipped |= {n for n in names if n.startswith(_SKIP_DYNLOAD)}
        return skipped

    return ignore


def copy_interpreter(interpreter: Interpreter, rootfs: Path) -> None:
    """The interpreter, its links and its standard library, under ``/usr/local``."""
    copy_file(rootfs, interpreter.image_executable, interpreter.executable, 0o755)
    symlink(rootfs, f"{PREFIX}/bin/python3", f"python{interpreter.version}")
    symlink(rootfs, f"{PREFIX}/bin/python", "python3")
    make_dir(rootfs, f"{PREFIX}/lib")
    shutil.copytree(
        interpreter.stdlib,
        at(rootfs, f"{PREFIX}/lib/python{interpreter.version}"),
        symlinks=True,
        ignore=_stdlib_ignore(interpreter.stdlib),
    )
    make_dir(rootfs, interpreter.image_site_packages)


def _ldd(files: Sequence[Path]) -> set[Path]:
    """The shared libraries (and the loader) the loader would load for ``files``."""
    libraries: set[Path] = set()
    for start in range(0, len(files), _LDD_BATCH):
        batch = list(files[start : start + _LDD_BATCH])
        output = command.run(["ldd", *batch], timeout=120)
        current = str(batch[0])
        for line in output.splitlines():
            text = line.strip()
            if not line.startswith(("\t", " ")) and text.endswith(":"):
                current = text[:-1]
                continue
            name, arrow, where = text.partition("=>")
            if arrow:
                path = where.strip().split(" (")[0].strip()
                if path == "not found":
                    raise InterpreterError(f"{current} needs {name.strip()}, which ldd cannot find")
                if path:
                    libraries.add(Path(path))
            elif text.startswith("/"):
                libraries.add(Path(text.split(" (")[0]))
    return libraries


def copy_libraries(rootfs: Path, interpreter: Interpreter, extra_binaries: Iterable[Path]) -> None:
    """Copy what ``ldd`` names for the interpreter, every C module in the image and the extra
    binaries; libraries of the interpreter's installation go under ``/usr/local`` and get a link
    in the loader's first search folder, the packages' own (``*.libs``) are there already."""
    site = at(rootfs, interpreter.image_site_packages)
    objects = [interpreter.executable, *extra_binaries]
    objects += sorted(at(rootfs, f"{PREFIX}/lib").rglob("*.so"))
    if interpreter.libpython:
        objects.append(interpreter.prefix / "lib" / interpreter.libpython)
    libc_dirs: set[str] = set()
    moved: list[str] = []
    for library in sorted(_ldd(objects)):
        if library.is_relative_to(site) or library.is_relative_to(Path(sys.prefix)):
            continue  # a package's own library, copied with it
        if library.is_relative_to(interpreter.prefix):
            image_path = f"{PREFIX}/{library.relative_to(interpreter.prefix).as_posix()}"
            moved.append(image_path)
        else:
            image_path = library.as_posix()
        if library.name.startswith("libc.so."):
            libc_dirs.add(library.parent.as_posix())
        if not os.path.lexists(at(rootfs, image_path)):
            copy_file(rootfs, image_path, library)
    if moved and len(libc_dirs) != 1:
        raise InterpreterError(f"cannot tell the loader's search folder: libc found in {sorted(libc_dirs)}")
    for image_path in moved:
        name = PurePosixPath(image_path).name
        symlink(rootfs, f"{next(iter(libc_dirs))}/{name}", image_path)


# --- the image ------------------------------------------------------------------------------


def _openssl_links(rootfs: Path) -> None:
    """OpenSSL's default CA file and folder as links to the bundle, as Debian has them."""
    paths = ssl.get_default_verify_paths()
    if paths.openssl_cafile and paths.openssl_cafile != CA_BUNDLE:
        symlink(rootfs, paths.openssl_cafile, CA_BUNDLE)
    ca_dir = str(PurePosixPath(CA_BUNDLE).parent)
    if paths.openssl_capath and paths.openssl_capath != ca_dir:
        symlink(rootfs, paths.openssl_capath, ca_dir)


def compile_bytecode(rootfs: Path, interpreter: Interpreter) -> None:
    """Compile the standard library and the packages for their paths in the image (unchecked-hash
    ``.pyc``: no source timestamps); a file that does not compile is left as source."""
    lib = f"{PREFIX}/lib/python{interpreter.version}"
    command.run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            "-d",
            lib,
            at(rootfs, lib),
        ],
        timeout=_PIP_TIMEOUT,
        check=False,  # exit 1 if any file failed: those are imported from source, as without bytecode
    )


def function_rootfs(
    rootfs: Path,
    wheel: Path,
    helm: Path,
    interpreter: Interpreter,
    dependencies: Sequence[metadata.Distribution],
    *,
    bytecode: bool = True,
) -> None:
    """Lay out the function image's root filesystem in the (empty) folder ``rootfs``."""
    shell = Path("/bin/sh").resolve()
    copy_interpreter(interpreter, rootfs)
    install_wheel(wheel, rootfs)
    for dist in dependencies:
        copy_distribution(dist, rootfs, interpreter)
    retarget_installed_scripts(rootfs, interpreter)
    if bytecode:
        compile_bytecode(rootfs, interpreter)
    copy_file(rootfs, f"{PREFIX}/bin/helm", helm, 0o755)
    copy_file(rootfs, "/bin/sh", shell, 0o755)
    copy_libraries(rootfs, interpreter, [shell])
    write_accounts(rootfs, (ROOT, APP))
    write_file(rootfs, "/etc/nsswitch.conf", NSSWITCH)
    add_ca_bundle(rootfs)
    _openssl_links(rootfs)
    add_tmp(rootfs)
    make_dir(rootfs, APP.home)
    make_dir(rootfs, HELM_HOME)


def function_inputs(
    helm: Path, interpreter: Interpreter, dependencies: Sequence[metadata.Distribution], repo: Path = REPO
) -> list[tuple[str, bytes | Path]]:
    """Everything the function image is built from, labelled, for its cache digest."""
    inputs: list[tuple[str, bytes | Path]] = [("ref", FUNCTION_IMAGE.encode())]
    inputs += [(f"source:{p.relative_to(repo).as_posix()}", p) for p in _source_files(repo)]
    inputs += [("python", sys.version.encode()), ("python:executable", interpreter.executable)]
    if interpreter.libpython:
        inputs.append(("python:libpython", interpreter.prefix / "lib" / interpreter.libpython))
    for dist in dependencies:
        label = f"dependency:{canonicalize_name(dist.metadata['Name'])}=={dist.version}"
        inputs.append((label, (dist.read_text("RECORD") or "").encode()))
    inputs += [("helm", helm), ("shell", Path("/bin/sh").resolve()), ("ca-bundle", HOST_CA_BUNDLE)]
    inputs += builder_sources("function", "rootfs", "ocipack")
    return inputs


def build_function_image(helm: Path, out_dir: Path, *, repo: Path = REPO, bytecode: bool = True) -> Path:
    """Build the function image into ``out_dir`` (reused when its inputs have not changed);
    return the tarball. ``helm`` is the helm binary to ship (the test bed's); ``bytecode=False``
    leaves the ``.pyc`` files out (smaller, slower to start)."""
    if not helm.is_file():
        raise MissingInputError(f"helm {helm} is not built")
    interpreter = current_interpreter()
    dependencies = resolve_dependencies(project_requirements(repo))
    name, _, tag = FUNCTION_IMAGE.rpartition("/")[2].partition(":")
    tarball = tarball_path(out_dir, name, tag)
    digest = inputs_digest(
        [*function_inputs(helm, interpreter, dependencies, repo), ("bytecode", str(bytecode).encode())]
    )
    if is_fresh(tarball, digest):
        return tarball
    forget(tarball)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=f".{name}-") as work:
        wheel = build_wheel(repo, Path(work))
        rootfs = Path(work) / "rootfs"
        rootfs.mkdir()
        function_rootfs(rootfs, wheel, helm, interpreter, dependencies, bytecode=bytecode)
        write_image(
            rootfs, tarball, FUNCTION_IMAGE, function_image_config(), owners={APP.home: APP_OWNER, HELM_HOME: APP_OWNER}
        )
    record(tarball, digest)
    return tarball
