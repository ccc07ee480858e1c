"""Kubeconfig files for the test bed's API server: :func:`write_kubeconfig` (one cluster, one
user, owner-only permissions), and the two kinds the tests need - a bearer token
(:func:`kubeconfig_for_token`, e.g. a ServiceAccount's) or a fresh client certificate
(:func:`kubeconfig_for_user`)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane import pki
from testbed.controlplane.model import ControlPlane

CLUSTER_NAME = "kubeopera-testbed"


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
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
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
        user_entry={"client-certificate-data": b64(cert.cert_pem), "client-key-data": b64(cert.key_pem)},
    )


def b64(data: bytes) -> str:
    """Base64 text, as kubeconfig ``*-data`` fields hold certificates and keys."""
    return base64.b64encode(data).decode()
