"""shared.adapters.vcluster_api's pure parts: which kubeconfigs can be used, and what a probe's answers mean.

The probe itself, over TLS with the stand-in vCluster's own CA, is tests/integration/test_vcluster_standin.py.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from shared.adapters.vcluster_api import CHECKS, Credentials, UnusableKubeconfig, VClusterApi, read_kubeconfig, verdict

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
