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
part that opens a connection (``urllib3``, honouring ``HTTPS_PROXY``; the credentials stay in
memory, see :class:`VClusterApi`).
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import re
import ssl
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import urllib3
import yaml

# libyaml's loader and dumper where PyYAML was built with it (ten times the pure-Python one's
# speed: resync reads every Ready Tenant's kubeconfig on every pass), the same results.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

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


# A kubeconfig is often read twice in a row (check-ready's look and its probe; rotation's steps),
# several at a time: the last few parsed are kept (the values are frozen). resync parses every
# stored one for its certificate's expiry while it lists them, long before its probes.
@functools.lru_cache(maxsize=32)
def read_kubeconfig(raw: bytes) -> Credentials:
    """The current context's server and credentials, with the certificates inline (as vcluster writes them)."""
    try:
        doc = yaml.load(raw, Loader=_Loader)  # noqa: S506 - a safe loader
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
    doc = yaml.load(raw, Loader=_Loader)  # noqa: S506 - a safe loader
    if not isinstance(doc, dict):
        raise UnusableKubeconfig("the kubeconfig is not a mapping")
    context = _named(doc.get("contexts"), doc.get("current-context"), "context")
    cluster = _named(doc.get("clusters"), context.get("cluster"), "cluster")
    if not isinstance(cluster, dict):
        raise UnusableKubeconfig("the kubeconfig's cluster is not a mapping")
    cluster["server"] = server
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False).encode()


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
    """Probes a vCluster through a kubeconfig; ``timeout`` per request.

    One TLS connection per probe, made as a customer's client makes it and nothing more: the
    kubeconfig's CA is the only one trusted (never the system's, never ``$REQUESTS_CA_BUNDLE``),
    the server's name is checked against its certificate, and the client certificate is presented.
    The CA is loaded from memory; OpenSSL loads a client certificate only from a path, so the
    certificate and its key go to an anonymous in-memory file (``memfd``: on no file system, gone
    when closed) for the one ``load_cert_chain``. ``HTTPS_PROXY`` is read when it is made,
    ``NO_PROXY`` on each probe (the test bed's cluster network is such a proxy)."""

    def __init__(self, timeout: float = 5.0) -> None:
        self._timeout = urllib3.Timeout(connect=2.0, read=timeout)
        self._proxy = urllib.request.getproxies_environment().get("https")

    def missing(self, kubeconfig: bytes) -> str | None:
        """What the vCluster behind ``kubeconfig`` still lacks (see the module), or None when it works."""
        try:
            credentials = read_kubeconfig(kubeconfig)
        except UnusableKubeconfig as err:
            return f"the stored kubeconfig cannot be used: {err}"
        return verdict(credentials.server, self._ask(credentials))

    def _ask(self, credentials: Credentials) -> list[tuple[Check, int | str]]:
        try:
            context = tls_context(credentials)
        except ssl.SSLError as err:  # a CA or key pair OpenSSL cannot load is refused as a client would be
            return [(CHECKS[0], f"TLS: {_reason(err)}")]
        answers: list[tuple[Check, int | str]] = []
        with _pool(credentials.server, context, self._timeout, self._proxy) as pool:
            for check in CHECKS:
                answer = self._get(pool, check.path)
                answers.append((check, answer))
                if answer != 200:
                    break
        return answers

    def _get(self, pool: urllib3.HTTPSConnectionPool, path: str) -> int | str:
        try:
            response = pool.urlopen("GET", path, retries=False, redirect=False, preload_content=True)
        except urllib3.exceptions.SSLError as err:
            return f"TLS: {_reason(err)}"
        except urllib3.exceptions.HTTPError as err:
            # urllib3's NewConnectionError (refused, no route) is a ConnectTimeoutError by class only
            if isinstance(err, urllib3.exceptions.TimeoutError) and not isinstance(
                err, urllib3.exceptions.NewConnectionError
            ):
                return f"no answer within {self._timeout.read_timeout:g}s"
            return f"{type(err).__name__}: {_reason(err)}"
        return response.status


def tls_context(credentials: Credentials) -> ssl.SSLContext:
    """A client's TLS context for ``credentials``: their CA alone, the server's name checked, their
    client certificate presented. ``ssl.SSLError`` when OpenSSL refuses the CA or the key pair."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=credentials.ca_pem.decode("ascii", "replace"))
    with _in_memory_file(credentials.cert_pem + b"\n" + credentials.key_pem) as path:
        context.load_cert_chain(path)
    return context


@contextmanager
def _in_memory_file(data: bytes) -> Iterator[str]:
    """A path to ``data`` that no other process can read: an anonymous memfd on Linux, a private
    temporary file (removed at once) elsewhere."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("vcluster-client", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.NamedTemporaryFile(prefix="vcluster-client-") as file:  # mode 0600
        file.write(data)
        file.flush()
        yield file.name


def _pool(
    server: str, context: ssl.SSLContext, timeout: urllib3.Timeout, proxy: str | None
) -> urllib3.HTTPSConnectionPool:
    """A one-connection pool to ``server``, through ``proxy`` unless ``NO_PROXY`` names its host."""
    url = urllib3.util.parse_url(server)
    host, port = url.host or "", url.port or 443
    options: dict[str, Any] = {"ssl_context": context, "cert_reqs": "CERT_REQUIRED", "timeout": timeout, "maxsize": 1}
    if proxy and not urllib.request.proxy_bypass(host):
        proxied = urllib3.ProxyManager(proxy, **options).connection_from_host(host, port, scheme="https")
        assert isinstance(proxied, urllib3.HTTPSConnectionPool)  # a CONNECT tunnel to the https server
        return proxied
    return urllib3.HTTPSConnectionPool(host, port, **options)


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


def _reason(err: Exception) -> str:
    """The innermost reason of a urllib3 error, without the URL noise around it: OpenSSL's words
    for a TLS failure (``[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: Hostname
    mismatch, ...``), else the innermost error's ``reason`` or text."""
    inner: BaseException = err
    while inner.args and isinstance(inner.args[0], BaseException):
        inner = inner.args[0]
    if isinstance(inner, ssl.SSLError):
        return re.sub(r" \(_ssl\.c:\d+\)$", "", str(inner))
    reason = getattr(inner, "reason", None)
    return str(reason if reason is not None else inner)
