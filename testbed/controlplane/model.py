""":class:`ControlPlane`: a running control plane and the files to talk to it, with the identities
and names every part of it agrees on (the admin user, the ServiceAccount token issuer)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.controlplane import pki

ADMIN_USER = "kubeopera-admin"
ADMIN_GROUPS: tuple[str, ...] = ("system:masters",)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


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
