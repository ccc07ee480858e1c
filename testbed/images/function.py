"""The function image (:data:`~testbed.images.catalog.FUNCTION_IMAGE`): the project's wheel in the
Dockerfile's layout, built here without docker.

What the Dockerfile's last stage makes, the way it makes it (:func:`function_image_config` is that
stage's ENV, USER, WORKDIR, EXPOSE and ENTRYPOINT; tests/deploy checks the two agree):

- CPython 3.11 as python:3.11-slim lays it out (:mod:`.interpreter`): ``/usr/local/bin/python3.11``
  (and ``python3``, ``python``), the standard library in ``/usr/local/lib/python3.11``, packages in
  its ``site-packages``, ``libpython3.11.so.1.0`` in ``/usr/local/lib``. The interpreter is this
  process's own base installation (:func:`~.interpreter.current_interpreter`; for the project's
  venv, pyenv's 3.11.7): a plain CPython build finds its prefix from where its executable is (the
  landmark ``lib/python3.11/os.py``), so moved under ``/usr/local`` it runs as it ran. Debian's
  ``/usr/bin/python3.11`` would not do: its ``site`` module looks in ``dist-packages``, not in
  ``site-packages``. The build is ``--enable-shared`` and its RUNPATH names its build prefix,
  which the image has not; the loader finds the library through a link from its first search
  folder (libc's), python:slim's ld.so.cache being out of reach without running ``ldconfig``.
  Left out: tests (``test``/``tests``/``idle_test`` folders and the ``_test*`` modules),
  ``idlelib``, ``tkinter``, ``turtledemo``, ``ensurepip``, ``lib2to3``, the static library's
  ``config-3.11-*`` folder and this machine's bytecode.
- Bytecode, compiled for the image's paths (``compileall -d``) as unchecked-hash ``.pyc``
  (:func:`~.interpreter.compile_bytecode`; the image never changes, and every mtime in the layer
  is 0), for the standard library and the packages (``bytecode=False`` leaves it out). The
  Dockerfile's ``pip install`` compiles the packages too; as the root filesystem is read-only and
  ``PYTHONDONTWRITEBYTECODE`` is set, without it every worker would compile what it imports:
  measured in a chroot, importing the functions' modules took 2.4 s without bytecode, 1.5 s with
  the packages' and 0.67 s with all (+15 MB for the standard library, +70 MB for the packages;
  about 20 s more to build).
- Every shared library ``ldd`` names for the interpreter, the C modules of the standard library
  and of the packages, and ``/bin/sh`` (pyhelm3 runs helm through a shell, as
  ``create_subprocess_shell``), at the path ``ldd`` found it, plus the loader (:mod:`.libraries`).
- The runtime wheel, built as the Dockerfile's ``wheel`` stage builds it (:mod:`.wheel`: its
  sources, :data:`~.wheel.WHEEL_SOURCES`, copied to a scratch folder, then ``pip wheel
  --no-deps``), and installed by pip (``--root <rootfs> --prefix /usr/local``). Its dependencies
  cannot be downloaded here (no package index): they are copied from the environment this runs
  in, file by file as each distribution's RECORD lists them, after checking that the installed
  versions satisfy the wheel's requirements (:mod:`.distributions`,
  :func:`~.distributions.resolve_dependencies`). The dependency closure is the one pip would
  install on this interpreter (markers evaluated here, extras followed).
- Console scripts (``/usr/local/bin/gunicorn``...) start with ``#!/usr/local/bin/python3.11``;
  their RECORD lines are updated to match (:mod:`.distributions`).
- helm (the test bed's, :attr:`testbed.toolchain.Toolchain.helm`) at ``/usr/local/bin/helm``, and
  coreutils' ``timeout`` at ``/usr/bin/timeout``, as python:3.11-slim has it (every helm runs
  under it: ``HELM_DEADLINE_SECONDS``, :mod:`shared.adapters.helm`).
- ``/etc/passwd`` and ``/etc/group`` with root and ``app`` (65532), ``/etc/nsswitch.conf``, the
  CA bundle (and OpenSSL's ``cert.pem``/``certs`` links to it, as Debian has them), ``/tmp``
  (1777), ``/home/app`` and ``/var/lib/kubeopera/helm`` owned by 65532.

:func:`build_function_image` caches the tarball by the digest of its inputs: the wheel's sources,
the interpreter, every dependency (name, version and RECORD), helm, the shell, the CA bundle and
the builder's modules (:data:`BUILDER_MODULES`); a second build with nothing changed only
computes that digest (well under a second plus the dependency check).
"""

from __future__ import annotations

import ssl
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from testbed.images.cache import builder_sources, forget, inputs_digest, is_fresh, record, tarball_path
from testbed.images.catalog import FUNCTION_IMAGE, NONROOT_UID
from testbed.images.distributions import (
    copy_distribution,
    project_requirements,
    resolve_dependencies,
    retarget_installed_scripts,
)
from testbed.images.errors import MissingInputError
from testbed.images.interpreter import PREFIX, Interpreter, compile_bytecode, copy_interpreter, current_interpreter
from testbed.images.libraries import copy_libraries
from testbed.images.ocipack import ImageConfig, Owner, write_image
from testbed.images.rootfs import (
    CA_BUNDLE,
    HOST_CA_BUNDLE,
    ROOT,
    Account,
    add_ca_bundle,
    add_tmp,
    copy_file,
    make_dir,
    symlink,
    write_accounts,
    write_file,
)
from testbed.images.wheel import REPO, build_wheel, install_wheel, source_files

APP = Account("app", NONROOT_UID, "/home/app")
APP_OWNER = Owner(APP.uid, APP.gid)
HELM_HOME = "/var/lib/kubeopera/helm"
TIMEOUT = "/usr/bin/timeout"  # coreutils', where python:3.11-slim has it
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
# The modules the function image is built by: a change in any of them rebuilds it.
BUILDER_MODULES = ("function", "interpreter", "libraries", "wheel", "distributions", "rootfs", "ocipack")
NSSWITCH = b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"


def function_image_config() -> ImageConfig:
    """The function image's config, as the Dockerfile's last stage sets it (no build needed)."""
    return ImageConfig(
        entrypoint=ENTRYPOINT,
        env=tuple(f"{name}={value}" for name, value in FUNCTION_ENV),
        user=f"{APP.uid}:{APP.gid}",  # numeric, so that the kubelet can verify runAsNonRoot
        working_dir=APP.home,
        exposed_ports=("8080/tcp",),
    )


def _openssl_links(rootfs: Path) -> None:
    """OpenSSL's default CA file and folder as links to the bundle, as Debian has them."""
    paths = ssl.get_default_verify_paths()
    if paths.openssl_cafile and paths.openssl_cafile != CA_BUNDLE:
        symlink(rootfs, paths.openssl_cafile, CA_BUNDLE)
    ca_dir = str(PurePosixPath(CA_BUNDLE).parent)
    if paths.openssl_capath and paths.openssl_capath != ca_dir:
        symlink(rootfs, paths.openssl_capath, ca_dir)


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
    shell, timeout = Path("/bin/sh").resolve(), Path(TIMEOUT).resolve()
    copy_interpreter(interpreter, rootfs)
    install_wheel(wheel, rootfs)
    for dist in dependencies:
        copy_distribution(dist, rootfs, interpreter)
    retarget_installed_scripts(rootfs, interpreter)
    if bytecode:
        compile_bytecode(rootfs, interpreter)
    copy_file(rootfs, f"{PREFIX}/bin/helm", helm, 0o755)
    copy_file(rootfs, "/bin/sh", shell, 0o755)
    copy_file(rootfs, TIMEOUT, timeout, 0o755)
    copy_libraries(rootfs, interpreter, [shell, timeout])
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
    inputs += [(f"source:{p.relative_to(repo).as_posix()}", p) for p in source_files(repo)]
    inputs += [("python", sys.version.encode()), ("python:executable", interpreter.executable)]
    if interpreter.libpython:
        inputs.append(("python:libpython", interpreter.prefix / "lib" / interpreter.libpython))
    for dist in dependencies:
        label = f"dependency:{canonicalize_name(dist.metadata['Name'])}=={dist.version}"
        inputs.append((label, (dist.read_text("RECORD") or "").encode()))
    inputs += [("helm", helm), ("shell", Path("/bin/sh").resolve()), ("timeout", Path(TIMEOUT).resolve())]
    inputs += [("ca-bundle", HOST_CA_BUNDLE)]
    inputs += builder_sources(*BUILDER_MODULES)
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
