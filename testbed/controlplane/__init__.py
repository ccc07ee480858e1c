"""A real Kubernetes control plane on loopback: etcd, kube-apiserver (as envtest runs them) and
kube-controller-manager with the namespace and garbage-collector controllers.

:func:`start_control_plane` makes a fresh PKI (see :mod:`testbed.controlplane.pki`), starts etcd and
kube-apiserver on free 127.0.0.1 ports under a :class:`~testbed.processes.Supervisor`,
waits for ``/readyz`` (checked with the admin client certificate), writes an admin kubeconfig
(user ``kubeopera-admin`` in ``system:masters``, certificate data embedded), then starts
kube-controller-manager (:mod:`testbed.controlplane.controllers`, its own client certificate and
kubeconfig, log ``kube-controller-manager.log``) and yields a :class:`ControlPlane`. Leaving the
``with`` block stops all three.

The API server runs with ``--authorization-mode=RBAC``, client-certificate authentication and a
ServiceAccount key pair, so TokenRequest works (:func:`request_token`) and a function can be run
as its own ServiceAccount through :func:`kubeconfig_for_token`. Only two controllers run: a
deleted namespace is emptied and goes away, and objects whose owner is deleted are garbage
collected. Nothing else does: no pods, no ``default`` ServiceAccount, no token Secrets.

This module talks to the API server through ``kubectl`` only; the ``kubernetes`` client is for
``shared/kube.py`` and the tests. Run ``python -m testbed.controlplane`` to start one by
hand (it prints the kubeconfig path and runs until Ctrl-C).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane import controllers, pki
from testbed.processes import HttpProbe, ProcessSpec, Supervisor, Terminated, free_port, run
from testbed.toolchain import Toolchain, ensure_all

ADMIN_USER = "kubeopera-admin"
ADMIN_GROUPS: tuple[str, ...] = ("system:masters",)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
CLUSTER_NAME = "kubeopera-testbed"

_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["system:apiserver"]
  # Everything the product's ServiceAccounts do, Events and Leases included: the RBAC test
  # (tests/e2e/test_lifecycle.py) compares it with the rules of deploy/base/rbac.
  - level: Metadata
    userGroups: ["system:serviceaccounts:kubeopera-system"]
  - level: None
    resources: [{group: "coordination.k8s.io", resources: ["leases"]}, {group: "", resources: ["events"]}]
  - level: Metadata
"""


@dataclass(frozen=True)
class ControlPlane:
    """A running etcd + kube-apiserver (+ kube-controller-manager) and the files to talk to it."""

    url: str
    port: int
    ca_file: Path
    ca_key_file: Path
    admin_kubeconfig: Path
    admin_cert: Path
    admin_key: Path
    etcd_url: str
    kubectl: Path
    run_dir: Path
    audit_log: Path
    service_account_issuer: str = SERVICE_ACCOUNT_ISSUER

    def certificate_authority(self) -> pki.CertificateAuthority:
        """The CA that signed everything here (can issue more client certificates)."""
        return pki.CertificateAuthority(cert_pem=self.ca_file.read_bytes(), key_pem=self.ca_key_file.read_bytes())


@contextlib.contextmanager
def start_control_plane(
    tools: Toolchain,
    workdir: Path,
    *,
    supervisor: Supervisor | None = None,
    ready_timeout: float = 120.0,
    extra_apiserver_args: Sequence[str] = (),
) -> Iterator[ControlPlane]:
    """Start etcd, kube-apiserver and kube-controller-manager under ``workdir``; stop them when
    the block ends.

    With ``supervisor`` given, the processes belong to it (and it stops them at the latest when
    it closes); otherwise a supervisor of its own is used for the block.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        sup = supervisor if supervisor is not None else stack.enter_context(Supervisor(workdir))
        _ca, files = pki.write_control_plane_pki(workdir / "pki", admin_user=ADMIN_USER, admin_groups=ADMIN_GROUPS)

        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd = sup.start(
            ProcessSpec(
                name="etcd",
                argv=(
                    str(tools.etcd),
                    "--name=testbed",
                    f"--data-dir={workdir / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=testbed={peer_url}",
                    "--unsafe-no-fsync=true",
                    "--log-level=warn",
                ),
            ),
            HttpProbe(f"{etcd_url}/health"),
            ready_timeout=ready_timeout,
        )
        stack.callback(sup.stop, etcd)

        port = free_port()
        url = f"https://127.0.0.1:{port}"
        audit_policy = workdir / "audit-policy.yaml"
        audit_policy.write_text(_AUDIT_POLICY)
        audit_log = sup.log_dir / "kube-apiserver-audit.log"
        (workdir / "apiserver-certs").mkdir(exist_ok=True)
        apiserver = sup.start(
            ProcessSpec(
                name="kube-apiserver",
                argv=(
                    str(tools.kube_apiserver),
                    f"--etcd-servers={etcd_url}",
                    f"--secure-port={port}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--cert-dir={workdir / 'apiserver-certs'}",
                    f"--tls-cert-file={files.serving_cert}",
                    f"--tls-private-key-file={files.serving_key}",
                    f"--client-ca-file={files.ca_cert}",
                    f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                    f"--service-account-key-file={files.service_account_public_key}",
                    f"--service-account-signing-key-file={files.service_account_key}",
                    f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                    "--authorization-mode=RBAC",
                    "--allow-privileged=true",
                    "--profiling=false",
                    # The lease reconciler would try to publish 127.0.0.1 as the endpoint of
                    # Service "kubernetes", which the API rejects (loopback), every 10 s.
                    "--endpoint-reconciler-type=none",
                    f"--audit-policy-file={audit_policy}",
                    f"--audit-log-path={audit_log}",
                    "--audit-log-format=json",
                    "--audit-log-maxbackup=1",
                    *extra_apiserver_args,
                ),
            ),
            HttpProbe(
                f"{url}/readyz",
                ca_file=files.ca_cert,
                client_cert=files.admin_cert,
                client_key=files.admin_key,
            ),
            ready_timeout=ready_timeout,
        )
        stack.callback(sup.stop, apiserver)

        kubeconfig = workdir / "admin.kubeconfig"
        write_kubeconfig(
            kubeconfig,
            server=url,
            ca_pem=files.ca_cert.read_bytes(),
            user=ADMIN_USER,
            user_entry={
                "client-certificate-data": _b64(files.admin_cert.read_bytes()),
                "client-key-data": _b64(files.admin_key.read_bytes()),
            },
        )
        control_plane = ControlPlane(
            url=url,
            port=port,
            ca_file=files.ca_cert,
            ca_key_file=files.ca_key,
            admin_kubeconfig=kubeconfig,
            admin_cert=files.admin_cert,
            admin_key=files.admin_key,
            etcd_url=etcd_url,
            kubectl=tools.kubectl,
            run_dir=workdir,
            audit_log=audit_log,
        )
        _wait_for_default_namespace(control_plane, ready_timeout)

        controller_manager = controllers.start_controller_manager(
            tools.kube_controller_manager,
            kubeconfig_for_user(
                control_plane,
                controllers.USER,
                controllers.GROUPS,
                workdir / "kube-controller-manager" / "kubeconfig",
            ),
            control_plane.certificate_authority(),
            workdir / "kube-controller-manager",
            supervisor=sup,
            ready_timeout=ready_timeout,
        )
        stack.callback(sup.stop, controller_manager)
        yield control_plane


def _wait_for_default_namespace(cp: ControlPlane, timeout: float) -> None:
    """/readyz can pass a moment before the bootstrap controller has made ``default``."""
    deadline = time.monotonic() + timeout
    while True:
        result = kubectl(cp, "get", "namespace", "default", "-o", "name", check=False)
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace default did not appear: {result.stderr.strip()}")
        time.sleep(0.2)


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_pem: bytes,
    user: str,
    user_entry: dict[str, Any],
    namespace: str | None = None,
) -> Path:
    """Write a one-cluster, one-user kubeconfig (owner-only permissions) and return its path."""
    context: dict[str, Any] = {"cluster": CLUSTER_NAME, "user": user}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": f"{user}@{CLUSTER_NAME}", "context": context}],
        "current-context": f"{user}@{CLUSTER_NAME}",
        "preferences": {},
    }
    return pki.write_private(Path(path), yaml.safe_dump(config, sort_keys=False).encode())


def kubeconfig_for_token(
    cp: ControlPlane, token: str, path: Path, *, user: str = "token-user", namespace: str | None = None
) -> Path:
    """A kubeconfig that authenticates with a bearer token (e.g. a ServiceAccount's)."""
    return write_kubeconfig(
        path,
        server=cp.url,
        ca_pem=cp.ca_file.read_bytes(),
        user=user,
        user_entry={"token": token},
        namespace=namespace,
    )


def kubeconfig_for_user(cp: ControlPlane, user: str, groups: Sequence[str], path: Path) -> Path:
    """A kubeconfig with a fresh client certificate for ``user`` in ``groups``."""
    cert = cp.certificate_authority().issue_client(user, groups)
    return write_kubeconfig(
        path,
        server=cp.url,
        ca_pem=cp.ca_file.read_bytes(),
        user=user,
        user_entry={"client-certificate-data": _b64(cert.cert_pem), "client-key-data": _b64(cert.key_pem)},
    )


def kubectl(
    cp: ControlPlane,
    *args: str,
    input: str | None = None,
    timeout: float = 60.0,
    check: bool = True,
    kubeconfig: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run kubectl against the control plane (as admin unless ``kubeconfig`` is given)."""
    config = kubeconfig or cp.admin_kubeconfig
    return run(
        [str(cp.kubectl), f"--kubeconfig={config}", *args],
        env={"KUBECONFIG": str(config)},
        input=input,
        timeout=timeout,
        check=check,
    )


def apply(cp: ControlPlane, manifest: str | dict[str, Any] | list[dict[str, Any]]) -> None:
    """``kubectl apply -f -`` a YAML string or object(s), as admin."""
    if isinstance(manifest, str):
        text = manifest
    elif isinstance(manifest, list):
        text = yaml.safe_dump_all(manifest)
    else:
        text = yaml.safe_dump(manifest)
    kubectl(cp, "apply", "-f", "-", input=text)


def create_namespace(cp: ControlPlane, name: str, labels: dict[str, str] | None = None) -> None:
    """Create a namespace (as admin)."""
    kubectl(cp, "create", "namespace", name)
    if labels:
        kubectl(cp, "label", "namespace", name, *(f"{k}={v}" for k, v in labels.items()))


def delete_namespace(cp: ControlPlane, name: str) -> None:
    """Ask for the namespace's deletion (the namespace controller finishes it); do not wait."""
    kubectl(cp, "delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def create_service_account(cp: ControlPlane, namespace: str, name: str) -> None:
    """Create a ServiceAccount (no ServiceAccount controller runs: nothing else appears with it)."""
    kubectl(cp, "create", "serviceaccount", name, "-n", namespace)


def request_token(
    cp: ControlPlane,
    namespace: str,
    service_account: str,
    *,
    duration: str = "1h",
    audiences: Sequence[str] = (),
) -> str:
    """A ServiceAccount token from the TokenRequest API (``kubectl create token``)."""
    args = ["create", "token", service_account, "-n", namespace, f"--duration={duration}"]
    args += [f"--audience={audience}" for audience in audiences]
    return kubectl(cp, *args).stdout.strip()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def main(argv: list[str] | None = None) -> int:
    """Start a control plane, print where it is as JSON, run until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workdir", type=Path, default=None, help="run folder (default: a new temp folder)")
    args = parser.parse_args(argv)
    # Ctrl-C must work even when started with SIGINT ignored (e.g. as a background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kubeopera-controlplane-"))
    tools = ensure_all()
    started = time.monotonic()
    try:
        with Supervisor(workdir) as sup, start_control_plane(tools, workdir, supervisor=sup) as cp:
            info = {
                "url": cp.url,
                "kubeconfig": str(cp.admin_kubeconfig),
                "run_dir": str(cp.run_dir),
                "logs": str(sup.log_dir),
                "pids": {p.name: p.pid for p in sup.processes},
                "seconds": round(time.monotonic() - started, 1),
            }
            print(json.dumps(info), flush=True)
            while all(p.running() for p in sup.processes):
                time.sleep(0.5)
            print("a control plane process exited; stopping", file=sys.stderr)
            return 1
    except KeyboardInterrupt as interrupt:
        return 128 + (interrupt.signum if isinstance(interrupt, Terminated) else signal.SIGINT)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
