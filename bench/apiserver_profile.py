"""kube-apiserver's own CPU profile over a stretch of a benchmark, by what its time went to.

The burst's CPU table names kube-apiserver the largest part after helm; this says why. The test
bed's API server is started with ``--profiling=true`` (off otherwise), its ``/debug/pprof/profile``
is read as admin for the seconds asked while the benchmark runs, and ``go tool pprof`` reads the
profile (Go writes it symbolized: no binary needed). Its ``-top -cum`` goes to ``bench/profiles/``.

The table groups the samples by what a request goes through in the API server: each row is the
share of all samples whose stack passes through one of the row's functions (a sample counts once
per row, and rows overlap where one layer calls another: serving a LIST encodes it).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from testbed.local.stack import Stack

from .report import Table, table

FLAG = "--profiling=true"

# Row, then the functions whose presence anywhere in a sample's stack puts it in the row.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("TLS (handshakes, records)", ("crypto/tls.",)),
    ("authentication (client certificates, tokens)", ("k8s.io/apiserver/pkg/authentication/",)),
    ("authorization (RBAC rules)", ("k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac.",)),
    ("audit log", ("k8s.io/apiserver/pkg/audit.", "k8s.io/apiserver/plugin/pkg/audit/")),
    ("decoding request bodies", ("k8s.io/apimachinery/pkg/runtime/serializer/versioning.(*codec).Decode",)),
    ("admission: validating policies (CEL)", ("k8s.io/apiserver/pkg/admission/plugin/policy/",)),
    ("  of which the object made unstructured for CEL", ("k8s.io/apiserver/pkg/admission/plugin/cel.newActivation",)),
    ("RBAC escalation check (Roles, bindings)", ("k8s.io/kubernetes/pkg/registry/rbac/validation.",)),
    (
        "CRD schema validation and defaulting",
        (
            "k8s.io/apiextensions-apiserver/pkg/apiserver/validation.",
            "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/",
        ),
    ),
    ("managedFields", ("k8s.io/apimachinery/pkg/util/managedfields.",)),
    ("encoding responses", ("k8s.io/apiserver/pkg/endpoints/handlers/responsewriters.",)),
    (
        "watch: serving watchers",
        (
            "k8s.io/apiserver/pkg/endpoints/handlers.serveWatch",
            "k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer)",
        ),
    ),
    (
        "watch cache: events to watchers",
        (
            "k8s.io/apiserver/pkg/storage/cacher.(*Cacher).dispatchEvent",
            "k8s.io/apiserver/pkg/storage/cacher.(*Cacher).processEvent",
            "k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher).",
            "k8s.io/apiserver/pkg/storage/cacher.(*watchCache).",
        ),
    ),
    ("storage (etcd3 store: an update's admission runs inside it)", ("k8s.io/apiserver/pkg/storage/etcd3.",)),
    ("  etcd client", ("go.etcd.io/etcd/client/v3.",)),
    ("garbage collection (Go runtime)", ("runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep")),
)


class ApiServerProfile:
    """Reads ``seconds`` of kube-apiserver's CPU profile in a thread, from when it is made."""

    def __init__(self, stack: Stack, seconds: int, folder: Path) -> None:
        self.path = folder / "kube-apiserver.pprof"
        self.seconds = seconds
        argv = [str(stack.tools.kubectl), f"--kubeconfig={stack.admin_kubeconfig}", "get", "--raw"]
        argv.append(f"/debug/pprof/profile?seconds={seconds}")
        self._argv = argv
        self._error: str = ""
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with self.path.open("wb") as out:
            done = subprocess.run(self._argv, stdout=out, stderr=subprocess.PIPE, timeout=self.seconds + 60)
        if done.returncode:
            self._error = done.stderr.decode(errors="replace").strip()

    def table(self, title_context: str, keep_in: Path) -> Table:
        self._thread.join(self.seconds + 90)
        if self._error or not self.path.exists() or self.path.stat().st_size == 0:
            raise RuntimeError(f"kube-apiserver's profile was not read: {self._error or 'empty'}")
        keep_in.mkdir(exist_ok=True)
        kept = keep_in / f"kube-apiserver-{time.strftime('%Y%m%d-%H%M', time.gmtime())}.txt"
        top = subprocess.run(
            [go(), "tool", "pprof", "-top", "-cum", "-nodecount=120", str(self.path)],
            capture_output=True,
            text=True,
            check=True,
        )
        kept.write_text(top.stdout)
        return layer_table(self.path, title_context, kept.name)


def go() -> str:
    found = shutil.which("go")
    if not found:
        raise RuntimeError("go is not on PATH: `go tool pprof` reads kube-apiserver's profile")
    return found


def samples(path: Path) -> list[tuple[float, tuple[str, ...]]]:
    """Each sample's CPU seconds with its stack (function names, leaf first)."""
    text = subprocess.run(
        [go(), "tool", "pprof", "-traces", str(path)], capture_output=True, text=True, check=True
    ).stdout
    out: list[tuple[float, tuple[str, ...]]] = []
    for block in text.split("-----------+-------------------------------------------------------")[1:]:
        rows = [line for line in block.splitlines() if line.strip()]
        if not rows:
            continue
        first = rows[0].split()
        if len(first) < 2:
            continue
        out.append((seconds_of(first[0]), (first[1], *(r.split()[0] for r in rows[1:]))))
    return out


def seconds_of(value: str) -> float:
    for unit, scale in (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("s", 1.0)):
        if value.endswith(unit):
            return float(value[: -len(unit)]) * scale
    return float(value)


def layer_table(path: Path, title_context: str, kept: str, top: int = 15) -> Table:
    stacks = samples(path)
    total = sum(s for s, _ in stacks)
    if total <= 0:
        raise RuntimeError(f"{path} holds no samples")
    rows: list[Sequence[str]] = []
    for name, prefixes in LAYERS:
        spent = sum(s for s, stack in stacks if any(f.startswith(p) for f in stack for p in prefixes))
        rows.append((name, f"{spent:.2f}", f"{100 * spent / total:.0f}%"))
    flat: defaultdict[str, float] = defaultdict(float)
    for s, stack in stacks:
        flat[stack[0]] += s
    leaves = sorted(flat.items(), key=lambda kv: -kv[1])[:top]
    return table(
        f"Where kube-apiserver's CPU went ({title_context}; pprof, by layer a sample passes through)",
        ("layer", "CPU s", "share"),
        rows,
        (
            f"{total:.1f} CPU-seconds sampled; rows overlap (a layer inside another counts in both)",
            "hottest leaf functions: " + "; ".join(f"{name} {100 * s / total:.1f}%" for name, s in leaves),
            f"the profile's top functions, cumulative: bench/profiles/{kept}",
        ),
    )
