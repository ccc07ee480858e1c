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

This package talks to the API server through ``kubectl`` only; the ``kubernetes`` client is for
``shared.adapters.kube`` and the tests. Run ``python -m testbed.controlplane`` to start one by
hand (it prints the kubeconfig path and runs until Ctrl-C).

The parts, one module each: :mod:`~testbed.controlplane.startup` (:func:`start_control_plane`),
:mod:`~testbed.controlplane.model` (:class:`ControlPlane`), :mod:`~testbed.controlplane.pki`,
:mod:`~testbed.controlplane.controllers` (kube-controller-manager),
:mod:`~testbed.controlplane.kubeconfig`, :mod:`~testbed.controlplane.client` (:func:`kubectl`,
:func:`apply`), :mod:`~testbed.controlplane.namespaces`,
:mod:`~testbed.controlplane.serviceaccounts` (TokenRequest) and :mod:`~testbed.controlplane.cli`
(:func:`main`). This package re-exports what callers use.
"""

from __future__ import annotations

from testbed.controlplane import controllers, pki
from testbed.controlplane.cli import main
from testbed.controlplane.client import apply, as_service_account, as_syncer, kubectl, wait_established
from testbed.controlplane.kubeconfig import CLUSTER_NAME, kubeconfig_for_token, kubeconfig_for_user, write_kubeconfig
from testbed.controlplane.model import ADMIN_GROUPS, ADMIN_USER, SERVICE_ACCOUNT_ISSUER, ControlPlane
from testbed.controlplane.namespaces import create_namespace, delete_namespace
from testbed.controlplane.serviceaccounts import create_service_account, request_token
from testbed.controlplane.startup import SERVICE_CLUSTER_IP_RANGE, start_control_plane

__all__ = [
    "as_service_account",
    "as_syncer",
    "ADMIN_GROUPS",
    "ADMIN_USER",
    "CLUSTER_NAME",
    "SERVICE_ACCOUNT_ISSUER",
    "SERVICE_CLUSTER_IP_RANGE",
    "ControlPlane",
    "apply",
    "controllers",
    "create_namespace",
    "create_service_account",
    "delete_namespace",
    "kubeconfig_for_token",
    "kubeconfig_for_user",
    "kubectl",
    "wait_established",
    "main",
    "pki",
    "request_token",
    "start_control_plane",
    "write_kubeconfig",
]
