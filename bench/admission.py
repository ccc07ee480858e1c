"""What the product's admission policies cost every other write in the cluster.

``python -m bench admission --writes 1000 --rounds 3`` starts the test bed's etcd and
kube-apiserver alone and, as the admin (no ServiceAccount of ours: a write the policies do not
judge), in namespace default, updates a Lease (a heartbeat, the cluster's most frequent write), a
ConfigMap of 16 KiB and a Secret of 64 KiB (the size of a small helm release record) ``writes``
times each, once with no admission policy and once with ``deploy/base/policy`` applied,
alternating, ``rounds`` times. It prints kube-apiserver's CPU per 1,000 writes (from /proc) each
way and what the policies add.

A ValidatingAdmissionPolicy whose ``matchConstraints`` take a write makes that write's object (and
its old object) unstructured for CEL before its ``matchConditions`` run, even when they then say
"not mine" (k8s.io/apiserver ``admission/plugin/cel.newActivation``): the burst's profile of
kube-apiserver (``python -m bench burst --profile-apiserver 20``) put validating policies at 13%
of its CPU. A policy that matches every write is paid by every write of every tenant of the cluster.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import requests

from testbed.controlplane import kubectl
from testbed.controlplane.startup import start_control_plane
from testbed.processes import Supervisor
from testbed.processes.procfs import cpu_seconds
from testbed.project import project_path
from testbed.toolchain import ensure_all

from .report import Table, spread, table

POLICY_DIR = project_path("deploy", "base", "policy")
NAMESPACE = "default"
SETTLE_SECONDS = 5.0  # a policy applied or deleted is in force once the API server's informer has it


def policy_files() -> list[Path]:
    return sorted(POLICY_DIR.glob("*.yaml"))


class Writer:
    """Merge patches as the admin, one after another, on one kept-alive connection."""

    def __init__(self, url: str, ca: Path, cert: Path, key: Path) -> None:
        self.url = url
        self.ca = str(ca)  # given with each request: REQUESTS_CA_BUNDLE would win over the session's
        self.session = requests.Session()
        self.session.cert = (str(cert), str(key))

    def create(self, path: str, body: dict[str, object]) -> None:
        answer = self.session.post(f"{self.url}{path}", json=body, timeout=30, verify=self.ca)
        if answer.status_code not in (201, 409):
            raise RuntimeError(f"POST {path}: {answer.status_code} {answer.text[:300]}")

    def patch(self, path: str, body: dict[str, object]) -> None:
        answer = self.session.patch(
            f"{self.url}{path}",
            data=json.dumps(body),
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=30,
            verify=self.ca,
        )
        if answer.status_code != 200:
            raise RuntimeError(f"PATCH {path}: {answer.status_code} {answer.text[:300]}")


LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
CONFIGMAPS = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"


def prepare(writer: Writer) -> None:
    writer.create(LEASES, {"metadata": {"name": "bench-heartbeat"}, "spec": {"holderIdentity": "bench"}})
    writer.create(CONFIGMAPS, {"metadata": {"name": "bench-16k"}, "data": {"blob": "x" * 16384, "n": "0"}})
    blob = base64.b64encode(os.urandom(64 * 1024)).decode()
    writer.create(SECRETS, {"metadata": {"name": "bench-64k"}, "data": {"blob": blob}})


def _stamp(i: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{i % 1000000:06d}Z"


# By kind: the i-th write's object and merge patch (each changes the object, as a real write does).
KINDS: dict[str, Callable[[int], tuple[str, dict[str, object]]]] = {
    "Lease heartbeat": lambda i: (f"{LEASES}/bench-heartbeat", {"spec": {"renewTime": _stamp(i)}}),
    "ConfigMap of 16 KiB": lambda i: (f"{CONFIGMAPS}/bench-16k", {"data": {"n": str(i)}}),
    "Secret of 64 KiB": lambda i: (f"{SECRETS}/bench-64k", {"metadata": {"annotations": {"n": str(i)}}}),
}


def write(writer: Writer, kind: str, n: int) -> None:
    for i in range(n):
        writer.patch(*KINDS[kind](i))


def main(argv: Sequence[str]) -> list[Table]:
    parser = argparse.ArgumentParser(
        prog="python -m bench admission", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--writes", type=int, default=1000, help="writes of each kind per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    tools = ensure_all()
    files = policy_files()
    applied = [f"--filename={f}" for f in files]
    settings = {"no policy": ("delete", "--ignore-not-found"), "deploy/base/policy": ("apply", "--server-side")}
    cpu: dict[tuple[str, str], list[float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-admission-") as folder,
        Supervisor(Path(folder)) as sup,
        start_control_plane(tools, Path(folder), supervisor=sup) as cp,
    ):
        apiserver = next(p for p in sup.processes if p.name == "kube-apiserver")
        writer = Writer(cp.url, cp.ca_file, cp.admin_cert, cp.admin_key)
        prepare(writer)
        for _ in range(args.rounds):
            for setting, verb in settings.items():
                kubectl(cp, *verb, *applied)
                time.sleep(SETTLE_SECONDS)
                for kind in KINDS:
                    write(writer, kind, 50)  # a warm connection and caches
                    before = sum(cpu_seconds(apiserver.pid))
                    write(writer, kind, args.writes)
                    spent = sum(cpu_seconds(apiserver.pid)) - before
                    cpu.setdefault((kind, setting), []).append(1000 * spent / args.writes)
    rows = []
    for kind in KINDS:
        bare, policed = cpu[(kind, "no policy")], cpu[(kind, "deploy/base/policy")]
        added = statistics.median(policed) - statistics.median(bare)
        rows.append(
            (kind, spread(bare), spread(policed), f"{added:+.2f} ({100 * added / statistics.median(bare):+.0f}%)")
        )
    return [
        table(
            f"kube-apiserver CPU-seconds per 1,000 writes by a user the policies do not judge "
            f"({args.writes} writes of each kind, {args.rounds} rounds: median (min-max))",
            ("write", "no policy", "deploy/base/policy", "the policies add"),
            rows,
            (
                "policies applied: " + ", ".join(f.name for f in files),
                "merge patches as the admin, one at a time on one connection; CPU from /proc (utime+stime)",
            ),
        )
    ]
