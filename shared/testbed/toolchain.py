"""Build the test bed's real binaries once, at pinned versions, into a cache outside the clone.

Every external program the test bed and the local runner start comes from here: etcd,
kube-apiserver, kubectl and kube-controller-manager (from ``k8s.io/kubernetes`` through a wrapper
module, because that module replaces its staging modules with local paths and cannot be ``go
install``-ed; the controller manager has a cache folder of its own, so adding it did not rebuild
the others), helm
(version-stamped so that ``pyhelm3.Client()`` can parse ``helm version``), an OCI registry
(distribution v3) and the Knative ApiServerSource receive adapter. Versions live in
``VERSIONS`` and nowhere else.

Layout: ``$KUBEOPERA_TOOLS_CACHE`` (default ``~/.cache/kubeopera-tenants``)
``/tools/<name>-<version>/bin/<binary>``. A tool folder appears only when its build finished
(built in a temporary folder, then renamed), so a warm run finds everything and builds
nothing. ``KUBEBUILDER_ASSETS``, when set, supplies ``etcd``, ``kube-apiserver`` and
``kubectl`` as envtest does; envtest's assets carry no ``kube-controller-manager``, so that one is
still built here.

Run ``python -m shared.testbed.toolchain`` to build everything and print the paths.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.16"
HELM_VERSION = "v3.16.4"
REGISTRY_VERSION = "v3.0.0"
KNATIVE_EVENTING_VERSION = "v0.48.0"
KNATIVE_SERVING_VERSION = "v0.48.0"

VERSIONS: Mapping[str, str] = {
    "kubernetes": KUBERNETES_VERSION,
    "etcd": ETCD_VERSION,
    "helm": HELM_VERSION,
    "registry": REGISTRY_VERSION,
    "knative-eventing": KNATIVE_EVENTING_VERSION,
    "knative-serving": KNATIVE_SERVING_VERSION,
}

# The checksum database answers 404 for knative.dev/eventing@v0.48.0, which the proxy serves;
# pinning its hashes here keeps checksum verification on (no GONOSUMDB) and the build offline-safe.
KNATIVE_EVENTING_SUMS = (
    "knative.dev/eventing v0.48.0 h1:jBwRXnhhfJ4S5EfBSgkhJzqtcfOIr8kfG1qoaXX56KA=",
    "knative.dev/eventing v0.48.0/go.mod h1:QcPwZqLMwN1hyDXRdCCt7GCR2R+4cDULGoJf1LKuGEE=",
)

_TOOLS_SRC = Path(__file__).resolve().parent.parent.parent / "tools"


class ToolchainError(RuntimeError):
    """A tool could not be built or found; the message says which and why."""


@dataclass(frozen=True)
class GoBuild:
    """One Go wrapper module and the binaries built from it."""

    name: str
    version: str
    requires: tuple[tuple[str, str], ...]
    packages: tuple[tuple[str, str], ...]  # (binary name, Go package)
    ldflags: str = ""
    replace_staging_of: str | None = None  # module whose k8s.io staging replaces we mirror
    source_dir: Path | None = None  # a main package of our own (copied into the module)
    sums: tuple[str, ...] = ()  # go.sum lines pinned here (see KNATIVE_EVENTING_SUMS)

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(binary for binary, _ in self.packages)


def _k8s_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.gitCommit=0000000000000000000000000000000000000000",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def _helm_ldflags(version: str) -> str:
    return " ".join(
        [
            f"-X helm.sh/helm/v3/internal/version.version={version}",
            "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
            "-X helm.sh/helm/v3/internal/version.metadata=",
        ]
    )


BUILDS: Mapping[str, GoBuild] = {
    "kubernetes": GoBuild(
        name="kubernetes",
        version=KUBERNETES_VERSION,
        requires=(("k8s.io/kubernetes", KUBERNETES_VERSION),),
        packages=(
            ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
            ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
        ),
        ldflags=_k8s_ldflags(KUBERNETES_VERSION),
        replace_staging_of="k8s.io/kubernetes",
    ),
    # Same module and version as "kubernetes", but its own entry (and cache folder): caches that
    # already hold kube-apiserver and kubectl keep them.
    "kube-controller-manager": GoBuild(
        name="kube-controller-manager",
        version=KUBERNETES_VERSION,
        requires=(("k8s.io/kubernetes", KUBERNETES_VERSION),),
        packages=(("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),),
        ldflags=_k8s_ldflags(KUBERNETES_VERSION),
        replace_staging_of="k8s.io/kubernetes",
    ),
    "etcd": GoBuild(
        name="etcd",
        version=ETCD_VERSION,
        requires=(("go.etcd.io/etcd/server/v3", ETCD_VERSION),),
        packages=(("etcd", "go.etcd.io/etcd/server/v3"),),
    ),
    "helm": GoBuild(
        name="helm",
        version=HELM_VERSION,
        requires=(("helm.sh/helm/v3", HELM_VERSION),),
        packages=(("helm", "helm.sh/helm/v3/cmd/helm"),),
        ldflags=_helm_ldflags(HELM_VERSION),
    ),
    "registry": GoBuild(
        name="registry",
        version=REGISTRY_VERSION,
        requires=(("github.com/distribution/distribution/v3", REGISTRY_VERSION),),
        packages=(("registry", "github.com/distribution/distribution/v3/cmd/registry"),),
    ),
    "apiserver-adapter": GoBuild(
        name="apiserver-adapter",
        version=KNATIVE_EVENTING_VERSION,
        requires=(("knative.dev/eventing", KNATIVE_EVENTING_VERSION),),
        packages=(("apiserver_receive_adapter", "knative.dev/eventing/cmd/apiserver_receive_adapter"),),
        sums=KNATIVE_EVENTING_SUMS,
    ),
    "knative-check": GoBuild(
        name="knative-check",
        version=f"{KNATIVE_EVENTING_VERSION}-{KNATIVE_SERVING_VERSION}",
        requires=(
            ("knative.dev/eventing", KNATIVE_EVENTING_VERSION),
            ("knative.dev/serving", KNATIVE_SERVING_VERSION),
        ),
        packages=(("knative-check", "."),),
        source_dir=_TOOLS_SRC / "knative-check",
        sums=KNATIVE_EVENTING_SUMS,
    ),
}

_ENVTEST_BINARIES = ("etcd", "kube-apiserver", "kubectl")


def cache_root() -> Path:
    """Where tools, their sources and the lock live; outside the clone."""
    configured = os.environ.get("KUBEOPERA_TOOLS_CACHE")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "kubeopera-tenants"


def _tool_dir(build: GoBuild) -> Path:
    digest = ""
    if build.source_dir is not None:
        digest = "-" + _source_digest(build.source_dir)
    return cache_root() / "tools" / f"{build.name}-{build.version}{digest}"


def _source_digest(folder: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(folder).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


@contextmanager
def _lock() -> Iterator[None]:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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


def _build(build: GoBuild, target: Path) -> None:
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    work = Path(tempfile.mkdtemp(prefix=f".{build.name}-", dir=target.parent))
    try:
        src = work / "src"
        src.mkdir()
        if build.source_dir is not None:
            for path in build.source_dir.iterdir():
                if path.suffix == ".go":
                    shutil.copy(path, src / path.name)
        lines = [f"module kubeopera.local/tools/{build.name}", "", "go 1.24", "", "require ("]
        lines += [f"\t{mod} {ver}" for mod, ver in build.requires]
        lines.append(")")
        if build.replace_staging_of:
            version = dict(build.requires)[build.replace_staging_of]
            lines += ["", "replace (", *_staging_replaces(build.replace_staging_of, version, src, env), ")"]
        (src / "go.mod").write_text("\n".join(lines) + "\n")
        if build.sums:
            (src / "go.sum").write_text("\n".join(build.sums) + "\n")
        bin_dir = work / "bin"
        for binary, package in build.packages:
            print(f"toolchain: building {binary} ({build.name} {build.version}) ...", file=sys.stderr, flush=True)
            started = time.monotonic()
            args = [_go(), "build", "-trimpath", "-o", str(bin_dir / binary)]
            if build.ldflags:
                args += ["-ldflags", f"-s -w {build.ldflags}"]
            else:
                args += ["-ldflags", "-s -w"]
            _run([*args, package], src, env)
            print(f"toolchain: built {binary} in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


@dataclass(frozen=True)
class Toolchain:
    """Absolute paths of the test bed's binaries."""

    etcd: Path
    kube_apiserver: Path
    kubectl: Path
    kube_controller_manager: Path
    helm: Path
    registry: Path
    apiserver_adapter: Path

    def bin_dirs(self) -> list[Path]:
        return sorted({p.parent for p in (self.etcd, self.kube_apiserver, self.kubectl, self.helm)})


def ensure(name: str) -> Path:
    """Build the named tool if it is not in the cache yet; return its bin folder."""
    build = BUILDS[name]
    target = _tool_dir(build)
    if all((target / "bin" / b).is_file() for b in build.binaries):
        return target / "bin"
    with _lock():
        if not all((target / "bin" / b).is_file() for b in build.binaries):
            target.parent.mkdir(parents=True, exist_ok=True)
            _build(build, target)
    return target / "bin"


def ensure_all() -> Toolchain:
    """Every binary the test bed runs, built on first use; honours KUBEBUILDER_ASSETS.

    kube-controller-manager is always built here: envtest's assets do not include it.
    """
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        folder = Path(assets)
        missing = [b for b in _ENVTEST_BINARIES if not (folder / b).is_file()]
        if missing:
            raise ToolchainError(f"KUBEBUILDER_ASSETS={assets} lacks {', '.join(missing)}")
        etcd, apiserver, kubectl = (folder / b for b in _ENVTEST_BINARIES)
    else:
        kube = ensure("kubernetes")
        etcd = ensure("etcd") / "etcd"
        apiserver, kubectl = kube / "kube-apiserver", kube / "kubectl"
    return Toolchain(
        etcd=etcd,
        kube_apiserver=apiserver,
        kubectl=kubectl,
        kube_controller_manager=ensure("kube-controller-manager") / "kube-controller-manager",
        helm=ensure("helm") / "helm",
        registry=ensure("registry") / "registry",
        apiserver_adapter=ensure("apiserver-adapter") / "apiserver_receive_adapter",
    )


def knative_check() -> Path:
    """The Go program that runs Knative's own Validate() on our manifests."""
    return ensure("knative-check") / "knative-check"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    started = time.monotonic()
    try:
        tools = ensure_all()
        extra = {"knative-check": str(knative_check())} if "--with-checker" in args else {}
    except ToolchainError as err:
        print(f"toolchain: {err}", file=sys.stderr)
        return 1
    paths = {k: str(v) for k, v in vars(tools).items()} | extra
    print(json.dumps({"versions": dict(VERSIONS), "paths": paths, "cache": str(cache_root())}, indent=2))
    print(f"toolchain: ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
