"""shared.adapters.vcluster_api's pure parts: which kubeconfigs can be used, and what a probe's answers mean.

The probe itself, over TLS with the stand-in vCluster's own CA, is tests/integration/test_vcluster_standin.py.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.adapters.vcluster_api import (
    CHECKS,
    Credentials,
    UnusableKubeconfig,
    VClusterApi,
    read_kubeconfig,
    tls_context,
    verdict,
)
from testbed.controlplane.pki import new_ca

SERVER = "https://vc-bob.vcluster-bob.svc:443"


def kubeconfig(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None, current: str = "c") -> bytes:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": SERVER, "certificate-authority-data": b64("CA")} | (cluster or {})}
        ],
        "users": [
            {
                "name": "u",
                "user": {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")} | (user or {}),
            }
        ],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": current,
    }
    return yaml.safe_dump(doc).encode()


def test_the_current_contexts_server_and_inline_credentials_are_read() -> None:
    assert read_kubeconfig(kubeconfig()) == Credentials(SERVER, b"CA", b"CERT", b"KEY")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (kubeconfig({"insecure-skip-tls-verify": True}), "skips TLS verification"),
        (kubeconfig({"server": "http://vc-bob.vcluster-bob.svc:80"}), "is not an https:// address"),
        (kubeconfig({"certificate-authority-data": ""}), "no the server's CA"),
        (kubeconfig(user={"client-key-data": None}), "no the client key"),
        (kubeconfig(user={"client-certificate-data": "not base64!"}), "is not base64"),
        (kubeconfig(current="elsewhere"), "no context 'elsewhere'"),
        (b"- just\n- a list\n", "not a mapping"),
        (b"{unclosed", "not YAML"),
    ],
    ids=["insecure", "plain-http", "no-ca", "no-key", "bad-base64", "no-context", "list", "not-yaml"],
)
def test_a_kubeconfig_a_customer_could_not_use_safely_is_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(UnusableKubeconfig, match=reason):
        read_kubeconfig(raw)


def test_an_unusable_kubeconfig_is_what_is_missing_without_any_connection() -> None:
    assert VClusterApi().missing(kubeconfig({"insecure-skip-tls-verify": True})) == (
        "the stored kubeconfig cannot be used: the kubeconfig skips TLS verification (insecure-skip-tls-verify)"
    )


def test_the_first_check_that_fails_is_what_is_missing() -> None:
    readyz, kubernetes, dns = CHECKS
    assert verdict(SERVER, [(readyz, 200), (kubernetes, 200), (dns, 200)]) is None
    assert verdict(SERVER, [(readyz, 200), (kubernetes, 404)]) == (
        f"the vCluster's API at {SERVER}: Service default/kubernetes does not exist "
        "(GET /api/v1/namespaces/default/services/kubernetes answered 404)"
    )
    assert verdict(SERVER, [(readyz, 500)]) == (
        f"the vCluster's API at {SERVER}: the API server is not ready (GET /readyz answered 500)"
    )
    assert verdict(SERVER, [(readyz, "TLS: certificate verify failed")]) == (
        f"the vCluster's API at {SERVER} cannot be reached with the stored kubeconfig: TLS: certificate verify failed"
    )
    assert verdict(SERVER, [(readyz, 200), (kubernetes, 200), (dns, 401)]) == (
        f"the vCluster's API at {SERVER}: the stored kubeconfig's client certificate is refused "
        "(GET /api/v1/namespaces/kube-system/services/kube-dns answered 401)"
    )
    assert verdict(SERVER, [(readyz, 200), (kubernetes, 200), (dns, 404)]) == (
        f"the vCluster's API at {SERVER}: cluster DNS (Service kube-system/kube-dns) does not exist "
        "(GET /api/v1/namespaces/kube-system/services/kube-dns answered 404)"
    )


def test_the_tls_context_trusts_the_kubeconfigs_ca_alone_and_its_key_reaches_no_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Never the system's CAs, never ``$SSL_CERT_FILE`` or ``$REQUESTS_CA_BUNDLE``; the credentials
    reach no file system (an anonymous in-memory file for OpenSSL's one load)."""
    ca = new_ca("vc-bob-ca")
    client = ca.issue_client("kubernetes-admin", ["system:masters"])
    elsewhere = new_ca("someone-else").cert_pem
    (tmp_path / "bundle.pem").write_bytes(elsewhere)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "bundle.pem"))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "bundle.pem"))
    assert hasattr(os, "memfd_create"), "Linux: the functions' platform"

    def no_files(*args: object, **kwargs: object) -> None:
        raise AssertionError("the client's key went to a temporary file")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", no_files)

    context = tls_context(Credentials(SERVER, ca.cert_pem, client.cert_pem, client.key_pem))

    assert [dict(pair[0] for pair in c["subject"])["commonName"] for c in context.get_ca_certs()] == ["vc-bob-ca"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_credentials_openssl_refuses_are_a_tls_failure_without_any_connection() -> None:
    """A key that is not the certificate's, or a CA that is not a certificate: what a customer's
    client says too, before it connects (the server's name does not resolve here)."""
    ca = new_ca("vc-bob-ca")
    client, other = ca.issue_client("a"), ca.issue_client("b")
    mismatched = kubeconfig(
        {"certificate-authority-data": base64.b64encode(ca.cert_pem).decode()},
        {
            "client-certificate-data": base64.b64encode(client.cert_pem).decode(),
            "client-key-data": base64.b64encode(other.key_pem).decode(),
        },
    )
    assert (VClusterApi().missing(mismatched) or "").startswith(
        f"the vCluster's API at {SERVER} cannot be reached with the stored kubeconfig: TLS: [X509: KEY_VALUES_MISMATCH]"
    )
    not_a_ca = kubeconfig()  # "CA", "CERT", "KEY"
    assert (VClusterApi().missing(not_a_ca) or "").startswith(
        f"the vCluster's API at {SERVER} cannot be reached with the stored kubeconfig: TLS: "
    )


def test_a_kubeconfig_read_twice_is_parsed_once() -> None:
    raw = kubeconfig(user={"client-key-data": base64.b64encode(b"KEY-twice").decode()})
    before = read_kubeconfig.cache_info().hits
    assert read_kubeconfig(raw) is read_kubeconfig(raw)
    assert read_kubeconfig.cache_info().hits == before + 1


def identity_kubeconfig(server: str) -> bytes:
    """A kubeconfig with a real CA and client certificate (OpenSSL loads them) for ``server``."""
    ca = new_ca("vc-bob-ca")
    client = ca.issue_client("kubernetes-admin", ["system:masters"])
    b64 = lambda pem: base64.b64encode(pem).decode()  # noqa: E731
    return kubeconfig(
        {"server": server, "certificate-authority-data": b64(ca.cert_pem)},
        {"client-certificate-data": b64(client.cert_pem), "client-key-data": b64(client.key_pem)},
    )


def test_a_silent_server_is_no_answer_and_a_refused_connection_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback only: a listener that never speaks TLS, then the same port closed."""
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        server = f"https://127.0.0.1:{listener.getsockname()[1]}"
        silent = VClusterApi(timeout=0.3).missing(identity_kubeconfig(server))
    assert (
        silent == f"the vCluster's API at {server} cannot be reached with the stored kubeconfig: no answer within 0.3s"
    )
    refused = VClusterApi(timeout=0.3).missing(identity_kubeconfig(server)) or ""
    assert refused.startswith(
        f"the vCluster's API at {server} cannot be reached with the stored kubeconfig: NewConnectionError"
    )
    assert "Connection refused" in refused, refused
