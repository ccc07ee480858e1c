"""Build the test bed's real binaries once, at pinned versions, into a cache outside the clone.

Every external program the test bed and the local runner start comes from here: etcd,
kube-apiserver, kubectl and kube-controller-manager (from ``k8s.io/kubernetes`` through a wrapper
module, because that module replaces its staging modules with local paths and cannot be ``go
install``-ed; the controller manager has a cache folder of its own, so adding it did not rebuild
the others), helm
(version-stamped so that ``pyhelm3.Client()`` can parse ``helm version``), an OCI registry
(distribution v3), the Knative ApiServerSource receive adapter, and Knative Eventing's control and
data plane (``knative-eventing``: controller, mtchannel_broker, broker ingress and filter, the
in-memory channel's controller and dispatcher, mtping), which also carries the manifests the test
bed applies, copied out of the module cache at build time (``ModuleCopy``): Eventing's
``config/`` as ``config/eventing/`` and Serving's ``config/core/300-resources/`` as
``config/serving-crds/``, so nothing later reads ``GOMODCACHE``. Versions live in ``VERSIONS``
and nowhere else.

Layout: ``$KUBEOPERA_TOOLS_CACHE`` (default ``~/.cache/kubeopera-tenants``)
``/tools/<name>-<version>/bin/<binary>`` (and ``/tools/<name>-<version>/config/...``). A tool
folder appears only when its build finished (built in a temporary folder, then renamed), so a warm
run finds everything and builds nothing. ``KUBEBUILDER_ASSETS``, when set, supplies ``etcd``,
``kube-apiserver`` and ``kubectl`` as envtest does; envtest's assets carry no
``kube-controller-manager``, so that one is still built here.

A cold build takes a while (about 13 minutes on 2 cores before Knative Eventing, see
``build_progress.DEFAULT_SECONDS``), so it says what it does on stderr: what is missing and how
long that usually takes, a line per tool, a progress line every 15 s while a ``go build`` runs and
the time left for everything still to build. The usual durations are those this toolchain
measured on this machine, kept in ``<cache>/timings.json`` (``testbed/toolchain/progress.py``).

Run ``python -m testbed.toolchain`` to build everything and print the paths.
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

from testbed.toolchain import progress as build_progress
from testbed.toolchain.progress import Progress, Step, Ticker

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
class ModuleCopy:
    """A folder of a Go module, copied out of the module cache into a tool folder at build time.

    ``dest`` is relative to the tool folder. The copy is ordinary, writable files, so nothing that
    uses the tool reads ``GOMODCACHE`` (which may be elsewhere, pruned, or read-only).
    """

    module: str
    version: str
    subdir: str  # inside the module; "" for the whole module
    dest: str


@dataclass(frozen=True)
class GoBuild:
    """One Go wrapper module and the binaries built from it (and module folders it carries)."""

    name: str
    version: str
    requires: tuple[tuple[str, str], ...]
    packages: tuple[tuple[str, str], ...]  # (binary name, Go package)
    ldflags: str = ""
    replace_staging_of: str | None = None  # module whose k8s.io staging replaces we mirror
    source_dir: Path | None = None  # a main package of our own (copied into the module)
    sums: tuple[str, ...] = ()  # go.sum lines pinned here (see KNATIVE_EVENTING_SUMS)
    copies: tuple[ModuleCopy, ...] = ()

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
    # Knative Eventing's control and data plane (unmodified upstream mains), the same module as the
    # adapter: the two pinned go.sum lines are enough, `-mod=mod` fills in the rest from
    # sum.golang.org (the result equals a full go.sum line for line). It carries the manifests the
    # test bed applies: Eventing's config/ and Serving's CRDs.
    "knative-eventing": GoBuild(
        name="knative-eventing",
        version=KNATIVE_EVENTING_VERSION,
        requires=(("knative.dev/eventing", KNATIVE_EVENTING_VERSION),),
        packages=(
            ("controller", "knative.dev/eventing/cmd/controller"),
            ("mtchannel_broker", "knative.dev/eventing/cmd/mtchannel_broker"),
            ("broker_ingress", "knative.dev/eventing/cmd/broker/ingress"),
            ("broker_filter", "knative.dev/eventing/cmd/broker/filter"),
            ("in_memory_channel_controller", "knative.dev/eventing/cmd/in_memory/channel_controller"),
            ("in_memory_channel_dispatcher", "knative.dev/eventing/cmd/in_memory/channel_dispatcher"),
            ("mtping", "knative.dev/eventing/cmd/mtping"),
        ),
        sums=KNATIVE_EVENTING_SUMS,
        copies=(
            ModuleCopy("knative.dev/eventing", KNATIVE_EVENTING_VERSION, "config", "config/eventing"),
            ModuleCopy(
                "knative.dev/serving", KNATIVE_SERVING_VERSION, "config/core/300-resources", "config/serving-crds"
            ),
        ),
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


def _write_module(build: GoBuild, src: Path, env: Mapping[str, str]) -> None:
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


def steps(build: GoBuild) -> tuple[Step, ...]:
    """The `go build` invocations of a tool, one per binary.

    Not one `go build -o DIR pkg...` for a tool's several binaries: measured for Knative Eventing's
    seven after the adapter (2 cores, empty GOCACHE), it was not faster (67 s vs 59 s one by one;
    on a loaded machine 316 s and 375 s vs 391 s and 311 s, the same CPU time), since each binary
    after the first reuses the first one's compiled packages anyway; one by one gives per-binary
    timings and progress.
    """
    return tuple(Step(build.name, binary) for binary in build.binaries)


def _go_build(build: GoBuild, step: Step, src: Path, bin_dir: Path, env: Mapping[str, str]) -> None:
    package = dict(build.packages)[step.binary]
    flags = f"-s -w {build.ldflags}".strip()
    _run([_go(), "build", "-trimpath", "-ldflags", flags, "-o", str(bin_dir / step.binary), package], src, env)


def _build(build: GoBuild, target: Path, progress: Progress) -> None:
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
            build_progress.record_timing(_timings_file(), step.binary, progress.step_finished())
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


def _is_complete(build: GoBuild, target: Path) -> bool:
    return all((target / "bin" / b).is_file() for b in build.binaries) and all(
        (target / copy.dest).is_dir() for copy in build.copies
    )


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
    knative: Path  # bin folder: controller, mtchannel_broker, broker_ingress, broker_filter, in_memory_*, mtping
    knative_config: Path  # eventing/ (Eventing's config/) and serving-crds/ (Serving's 300-resources/)

    def bin_dirs(self) -> list[Path]:
        return sorted({p.parent for p in (self.etcd, self.kube_apiserver, self.kubectl, self.helm)})


def _timings_file() -> Path:
    return cache_root() / build_progress.TIMINGS_FILE


def _emit(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _progress(names: list[str]) -> Progress:
    """What is missing of the named tools, with the usual time of each step, reporting to stderr."""
    builds = [BUILDS[name] for name in names]
    plan = {build.name: steps(build) for build in builds if not _is_complete(build, _tool_dir(build))}
    recorded = build_progress.load_timings(_timings_file()) if plan else {}
    return Progress(plan, recorded, time.monotonic, _emit)


def ensure(name: str, progress: Progress | None = None) -> Path:
    """Build the named tool if it is not in the cache yet; return its bin folder.

    ``progress`` is the plan of a caller that builds several tools (``ensure_all``), so its
    estimate of the time left covers them all.
    """
    build = BUILDS[name]
    target = _tool_dir(build)
    if _is_complete(build, target):
        return target / "bin"
    if progress is None:
        progress = _progress([name])
    with _lock():
        if _is_complete(build, target):
            progress.tool_skipped(name)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            progress.tool_started(name, build.version)
            _build(build, target, progress)
            progress.tool_finished(name)
    return target / "bin"


def _envtest_binaries(assets: str) -> tuple[Path, Path, Path]:
    folder = Path(assets)
    missing = [b for b in _ENVTEST_BINARIES if not (folder / b).is_file()]
    if missing:
        raise ToolchainError(f"KUBEBUILDER_ASSETS={assets} lacks {', '.join(missing)}")
    etcd, apiserver, kubectl = (folder / b for b in _ENVTEST_BINARIES)
    return etcd, apiserver, kubectl


def ensure_all() -> Toolchain:
    """Every binary the test bed runs, built on first use; honours KUBEBUILDER_ASSETS.

    kube-controller-manager is always built here: envtest's assets do not include it.
    """
    # One tool after another, not side by side: on 2 cores with an empty GOCACHE, helm then
    # registry took 254 s, both at once 370 s (each `go build` already keeps both cores busy, and
    # two of them compile the packages they share twice).
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    envtest = _envtest_binaries(assets) if assets else None
    names = [] if envtest else ["kubernetes", "etcd"]
    names += ["kube-controller-manager", "helm", "registry", "apiserver-adapter", "knative-eventing"]
    progress = _progress(names)
    progress.announce(cache_root())
    bins = {name: ensure(name, progress) for name in names}
    if envtest is None:
        envtest = (bins["etcd"] / "etcd", bins["kubernetes"] / "kube-apiserver", bins["kubernetes"] / "kubectl")
    etcd, apiserver, kubectl = envtest
    return Toolchain(
        etcd=etcd,
        kube_apiserver=apiserver,
        kubectl=kubectl,
        kube_controller_manager=bins["kube-controller-manager"] / "kube-controller-manager",
        helm=bins["helm"] / "helm",
        registry=bins["registry"] / "registry",
        apiserver_adapter=bins["apiserver-adapter"] / "apiserver_receive_adapter",
        knative=bins["knative-eventing"],
        knative_config=bins["knative-eventing"].parent / "config",
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

