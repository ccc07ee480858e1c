"""Certificates and keys for the test bed's kube-apiserver, made on the fly with ``cryptography``.

One run gets one throw-away certificate authority. It signs the API server's serving certificate
(valid for 127.0.0.1, localhost, the in-cluster ``kubernetes`` names and the first service IP),
and client certificates the way Kubernetes reads them: the subject's CN is the user name, each O
is a group (``system:masters`` makes an admin). The service-account key pair (RSA) lets the API
server sign and check ServiceAccount tokens, so TokenRequest (``kubectl create token``) works.

Values are frozen dataclasses holding PEM bytes; :func:`write_control_plane_pki` writes the set
to files with owner-only permissions and returns their paths.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=7)
_CLOCK_SKEW = dt.timedelta(hours=1)

SERVING_DNS_NAMES: tuple[str, ...] = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVING_IPS: tuple[str, ...] = ("127.0.0.1", "10.0.0.1")


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA that can issue serving and client certificates."""

    cert_pem: bytes
    key_pem: bytes

    def issue_serving(
        self, dns_names: Sequence[str], ip_addresses: Sequence[str], validity: dt.timedelta = _VALIDITY
    ) -> CertKey:
        """A TLS server certificate for the given DNS names and IP addresses."""
        san: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        san += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        common_name = dns_names[0] if dns_names else ip_addresses[0]
        return self._issue(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            san=san,
            validity=validity,
        )

    def issue_client(self, user: str, groups: Sequence[str] = (), validity: dt.timedelta = _VALIDITY) -> CertKey:
        """A client certificate that Kubernetes reads as ``user`` in ``groups`` (CN / O)."""
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        return self._issue(x509.Name(attributes), usage=ExtendedKeyUsageOID.CLIENT_AUTH, san=[], validity=validity)

    def _issue(
        self,
        subject: x509.Name,
        *,
        usage: x509.ObjectIdentifier,
        san: list[x509.GeneralName],
        validity: dt.timedelta = _VALIDITY,
    ) -> CertKey:
        ca_cert = x509.load_pem_x509_certificate(self.cert_pem)
        ca_key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise TypeError("the test bed CA key must be an EC key")
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return CertKey(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key))


@dataclass(frozen=True)
class ServiceAccountKeys:
    """The RSA key pair the API server signs (private) and verifies (public) tokens with."""

    private_pem: bytes
    public_pem: bytes


@dataclass(frozen=True)
class ControlPlanePKIFiles:
    """Where :func:`write_control_plane_pki` put each file."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_public_key: Path


def new_ca(common_name: str = "kubeopera-testbed-ca", validity: dt.timedelta = _VALIDITY) -> CertificateAuthority:
    """A fresh self-signed certificate authority (EC P-256, valid for a week unless told)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key))


def new_service_account_keys() -> ServiceAccountKeys:
    """A 2048-bit RSA key pair for ServiceAccount tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return ServiceAccountKeys(private_pem=_key_pem(key), public_pem=public)


def write_private(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def write_control_plane_pki(
    folder: Path, *, admin_user: str = "kubeopera-admin", admin_groups: Sequence[str] = ("system:masters",)
) -> tuple[CertificateAuthority, ControlPlanePKIFiles]:
    """Make the CA, serving cert, admin client cert and SA keys; write them under ``folder``."""
    ca = new_ca()
    serving = ca.issue_serving(SERVING_DNS_NAMES, SERVING_IPS)
    admin = ca.issue_client(admin_user, admin_groups)
    sa = new_service_account_keys()
    files = ControlPlanePKIFiles(
        ca_cert=write_private(folder / "ca.crt", ca.cert_pem),
        ca_key=write_private(folder / "ca.key", ca.key_pem),
        serving_cert=write_private(folder / "apiserver.crt", serving.cert_pem),
        serving_key=write_private(folder / "apiserver.key", serving.key_pem),
        admin_cert=write_private(folder / "admin.crt", admin.cert_pem),
        admin_key=write_private(folder / "admin.key", admin.key_pem),
        service_account_key=write_private(folder / "sa.key", sa.private_pem),
        service_account_public_key=write_private(folder / "sa.pub", sa.public_pem),
    )
    return ca, files


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
