""":func:`start_control_plane`: etcd, kube-apiserver and kube-controller-manager on loopback,
started under a :class:`~testbed.processes.Supervisor` and stopped when the ``with`` block ends.

It makes a fresh PKI (:mod:`testbed.controlplane.pki`), starts etcd and kube-apiserver on free
127.0.0.1 ports, waits for ``/readyz`` (checked with the admin client certificate), writes an
admin kubeconfig (user ``kubeopera-admin`` in ``system:masters``, certificate data embedded),
waits for namespace ``default``, then starts kube-controller-manager
(:mod:`testbed.controlplane.controllers`) and yields a
:class:`~testbed.controlplane.model.ControlPlane`.

kube-apiserver runs with ``--authorization-mode=RBAC``, client-certificate authentication, a
ServiceAccount key pair (so TokenRequest works) and an audit log of what the product's
ServiceAccounts do (:data:`AUDIT_POLICY`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from testbed.controlplane import controllers as controller_manager_options
from testbed.controlplane import pki
from testbed.controlplane.controllers import start_controller_manager
from testbed.controlplane.kubeconfig import b64, kubeconfig_for_user, write_kubeconfig
from testbed.controlplane.model import ADMIN_GROUPS, ADMIN_USER, SERVICE_ACCOUNT_ISSUER, ControlPlane
from testbed.controlplane.namespaces import wait_for_default_namespace
from testbed.processes import HttpProbe, ProcessSpec, Supervisor, free_port
from testbed.toolchain import Toolchain

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"

AUDIT_POLICY = """\
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


@contextlib.contextmanager
def start_control_plane(
    tools: Toolchain,
    workdir: Path,
    *,
    supervisor: Supervisor | None = None,
    ready_timeout: float = 120.0,
    extra_apiserver_args: Sequence[str] = (),
    controllers: Sequence[str] = controller_manager_options.CONTROLLERS,
    extra_controller_manager_args: Sequence[str] = (),
) -> Iterator[ControlPlane]:
    """Start etcd, kube-apiserver and kube-controller-manager under ``workdir``; stop them when
    the block ends.

    With ``supervisor`` given, the processes belong to it (and it stops them at the latest when
    it closes); otherwise a supervisor of its own is used for the block. ``extra_apiserver_args``
    and ``extra_controller_manager_args`` are appended to the two command lines (a single-value
    flag given again overrides the one here), ``controllers`` is kube-controller-manager's
    ``--controllers`` list (the real node of :mod:`testbed.node` runs them all: ``*``).
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
        audit_policy.write_text(AUDIT_POLICY)
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
                    # Not the 100 MB by default: bench burst reads the whole log of several runs
                    # (before this, its earlier runs were rotated away and its counts were a third).
                    "--audit-log-maxsize=4096",
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
                "client-certificate-data": b64(files.admin_cert.read_bytes()),
                "client-key-data": b64(files.admin_key.read_bytes()),
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
        wait_for_default_namespace(control_plane, ready_timeout)

        controller_manager = start_controller_manager(
            tools.kube_controller_manager,
            kubeconfig_for_user(
                control_plane,
                controller_manager_options.USER,
                controller_manager_options.GROUPS,
                workdir / "kube-controller-manager" / "kubeconfig",
            ),
            control_plane.certificate_authority(),
            workdir / "kube-controller-manager",
            supervisor=sup,
            ready_timeout=ready_timeout,
            controllers=controllers,
            extra_args=extra_controller_manager_args,
        )
        stack.callback(sup.stop, controller_manager)
        yield control_plane
