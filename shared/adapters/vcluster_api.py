"""The vCluster's own API, reached exactly as its customer will reach it: through the kubeconfig vcluster exported.

"StatefulSet ready and Secret written" does not prove that the customer can use the cluster: the
real vcluster 0.21.2, booted once with the wrong Service range, runs and writes its Secret, yet has
no ``kubernetes`` Service and no DNS inside (design.md section 5). So before a Tenant is Ready,
check-ready takes the kubeconfig it is about to hand over (its server, its CA, its client
certificate; never ``insecure-skip-tls-verify``) and asks the vCluster, in order:

1. ``GET /readyz``: the API server says it is ready (``ok``);
2. ``GET /api/v1/namespaces/default/services/kubernetes``: the syncer made the ``kubernetes``
   Service (it does so only with the host's Service range);
3. ``GET /api/v1/namespaces/kube-system/services/kube-dns``: cluster DNS is deployed.

:func:`missing` answers what is still missing, in words for the Tenant's message, or None when all
three hold. :func:`read_kubeconfig` and :func:`verdict` are pure; :class:`VClusterApi` is the only
part that opens a connection (``requests``, which honours ``HTTPS_PROXY``; the credentials go to a
private temporary directory for the one probe and are removed after it).
"""

from __future__ import annotations

import base64
import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import requests
import yaml

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    """One request a working vCluster answers 200, and what its absence is called."""

    path: str
    what: str


CHECKS: tuple[Check, ...] = (
    Check("/readyz", "the API server is not ready"),
    Check("/api/v1/namespaces/default/services/kubernetes", "Service default/kubernetes does not exist"),
    Check(
        "/api/v1/namespaces/kube-system/services/kube-dns", "cluster DNS (Service kube-system/kube-dns) does not exist"
    ),
)


@dataclass(frozen=True)
class Credentials:
    """What a customer's client takes from the kubeconfig: the server, the CA it trusts, the client certificate."""

    server: str
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


class UnusableKubeconfig(ValueError):
    """The kubeconfig cannot be used as it is (no server, no CA, insecure, no client certificate)."""


def read_kubeconfig(raw: bytes) -> Credentials:
    """The current context's server and credentials, with the certificates inline (as vcluster writes them)."""
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise UnusableKubeconfig(f"the kubeconfig is not YAML: {err}") from err
    if not isinstance(doc, Mapping):
        raise UnusableKubeconfig("the kubeconfig is not a mapping")
    context = _named(doc.get("contexts"), doc.get("current-context"), "context")
    cluster = _named(doc.get("clusters"), context.get("cluster"), "cluster")
    user = _named(doc.get("users"), context.get("user"), "user")
    if cluster.get("insecure-skip-tls-verify"):
        raise UnusableKubeconfig("the kubeconfig skips TLS verification (insecure-skip-tls-verify)")
    server = str(cluster.get("server") or "")
    if not server.startswith("https://"):
        raise UnusableKubeconfig(f"the kubeconfig's server {server!r} is not an https:// address")
    return Credentials(
        server=server.rstrip("/"),
        ca_pem=_inline(cluster, "certificate-authority-data", "the server's CA"),
        cert_pem=_inline(user, "client-certificate-data", "the client certificate"),
        key_pem=_inline(user, "client-key-data", "the client key"),
    )


def with_server(raw: bytes, server: str) -> bytes:
    """The same kubeconfig with the current context's cluster at ``server`` (the external address
    store-kubeconfig adds as a second key); everything else, credentials included, as it was."""
    doc = yaml.safe_load(raw)
    if not isinstance(doc, dict):
        raise UnusableKubeconfig("the kubeconfig is not a mapping")
    context = _named(doc.get("contexts"), doc.get("current-context"), "context")
    cluster = _named(doc.get("clusters"), context.get("cluster"), "cluster")
    if not isinstance(cluster, dict):
        raise UnusableKubeconfig("the kubeconfig's cluster is not a mapping")
    cluster["server"] = server
    return yaml.safe_dump(doc, sort_keys=False).encode()


def verdict(server: str, answers: Sequence[tuple[Check, int | str]]) -> str | None:
    """What the answers say is missing (the first check that did not answer 200), or None.

    An answer is the HTTP status, or the words of a failure to get one (TLS, connection)."""
    for check, answer in answers:
        if answer == 200:
            continue
        if isinstance(answer, str):
            return f"the vCluster's API at {server} cannot be reached with the stored kubeconfig: {answer}"
        what = "the stored kubeconfig's client certificate is refused" if answer in (401, 403) else check.what
        return f"the vCluster's API at {server}: {what} (GET {check.path} answered {answer})"
    return None


class VClusterProbe(Protocol):
    """What check-ready needs of a vCluster's API (the unit tests' fake has the same shape)."""

    def missing(self, kubeconfig: bytes) -> str | None: ...


class VClusterApi:
    """Probes a vCluster through a kubeconfig; ``timeout`` per request."""

    def __init__(self, timeout: float = 5.0) -> None:
        self._timeout = timeout

    def missing(self, kubeconfig: bytes) -> str | None:
        """What the vCluster behind ``kubeconfig`` still lacks (see the module), or None when it works."""
        try:
            credentials = read_kubeconfig(kubeconfig)
        except UnusableKubeconfig as err:
            return f"the stored kubeconfig cannot be used: {err}"
        return verdict(credentials.server, self._ask(credentials))

    def _ask(self, credentials: Credentials) -> list[tuple[Check, int | str]]:
        answers: list[tuple[Check, int | str]] = []
        with tempfile.TemporaryDirectory(prefix="vcluster-api-") as folder:
            ca, cert, key = (
                _private(Path(folder) / name, data)
                for name, data in (
                    ("ca.crt", credentials.ca_pem),
                    ("client.crt", credentials.cert_pem),
                    ("client.key", credentials.key_pem),
                )
            )
            with requests.Session() as session:
                for check in CHECKS:
                    answer = self._get(session, credentials.server + check.path, str(ca), (str(cert), str(key)))
                    answers.append((check, answer))
                    if answer != 200:
                        break
        return answers

    def _get(self, session: requests.Session, url: str, ca: str, cert: tuple[str, str]) -> int | str:
        # verify= on the request, not the session: requests lets $REQUESTS_CA_BUNDLE override a
        # session's CA, and only the vCluster's own CA may vouch for it.
        try:
            return session.get(url, verify=ca, cert=cert, timeout=(2.0, self._timeout)).status_code
        except requests.exceptions.SSLError as err:
            return f"TLS: {_reason(err)}"
        except requests.Timeout:
            return f"no answer within {self._timeout:g}s"
        except requests.RequestException as err:
            return f"{type(err).__name__}: {_reason(err)}"


def _named(items: Any, name: Any, kind: str) -> Mapping[str, Any]:
    for item in items or ():
        if isinstance(item, Mapping) and item.get("name") == name and isinstance(item.get(kind), Mapping):
            return item[kind]  # type: ignore[no-any-return]
    raise UnusableKubeconfig(f"the kubeconfig has no {kind} {name!r}")


def _inline(section: Mapping[str, Any], key: str, what: str) -> bytes:
    value = section.get(key)
    if not value:
        raise UnusableKubeconfig(f"the kubeconfig carries no {what} ({key})")
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError as err:
        raise UnusableKubeconfig(f"{key} is not base64") from err


def _private(path: Path, data: bytes) -> Path:
    path.touch(mode=0o600)
    path.write_bytes(data)
    return path


def _reason(err: Exception) -> str:
    """The innermost reason of a requests/urllib3 error, without the URL noise around it."""
    inner: BaseException = err
    while inner.args and isinstance(inner.args[0], BaseException):
        inner = inner.args[0]
    reason = getattr(inner, "reason", None)
    return str(reason if reason is not None else inner)
