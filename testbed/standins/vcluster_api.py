"""STAND-IN for a vCluster's own API server: one TLS port for every booted vCluster, chosen by SNI.

The real vcluster 0.21.2 pod serves its virtual API on port 8443 behind Service ``<release>``
(port 443), with a CA of its own, a serving certificate for ``<release>``,
``<release>.<namespace>``, ``localhost``, the Service's cluster IP and whatever
``controlPlane.proxy.extraSANs`` adds (not the ``.svc`` forms otherwise), and it exports a
``system:masters`` client certificate valid for 10 years (design.md section 5). The stand-in
vCluster (:mod:`testbed.standins.vcluster`) makes the same PKI per vCluster when it boots one and
publishes it here; this server then answers what check-ready asks through the exported kubeconfig,
as the real one does:

- the TLS handshake presents the vCluster's serving certificate to a client that asked (SNI) for
  any name of its Service (``<release>.<namespace>``, ``.svc``, ``.svc.cluster.local``) or of its
  certificate, whether or not the certificate covers that name (the client's check then fails, as
  against the real pod); a name of no booted vCluster gets a certificate of a throw-away CA;
- a client certificate is verified against that vCluster's CA (another CA's fails the handshake);
- ``GET /readyz`` answers ``ok``; ``GET /api/v1/namespaces/default/services/kubernetes`` and
  ``.../kube-system/services/kube-dns`` answer the Services with a client certificate (401
  without), or 404 with the API server's ``Status`` body where the vCluster has none: the real
  vCluster that first booted with the wrong Service range keeps it and has neither (its range is on
  its PVC), even after an upgrade that sets the right one;
- a vCluster published ``down`` refuses the handshake, as a pod that does not serve would leave
  the client without an answer.

How a client gets here: on the local tier the functions' ``HTTPS_PROXY`` is the service proxy,
which tunnels ``CONNECT <name>.svc:443`` to this port (:mod:`testbed.standins.service_proxy`); on
the cluster tier the stand-in vCluster points Service ``<release>`` at this port with an
EndpointSlice, so real CoreDNS and kube-proxy carry a pod's request here.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import logging
import socketserver
import ssl
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.controlplane import pki

log = logging.getLogger(__name__)

KUBERNETES_PATH = "/api/v1/namespaces/default/services/kubernetes"
DNS_PATH = "/api/v1/namespaces/kube-system/services/kube-dns"


@dataclass(frozen=True)
class VirtualApi:
    """What one booted vCluster's API serves: its names, its PKI, and what exists inside it."""

    namespace: str
    release: str
    names: tuple[str, ...]  # the serving certificate's DNS names
    ca: pki.CertificateAuthority
    serving: pki.CertKey
    kubernetes_ip: str | None  # the virtual ``kubernetes`` Service's IP; None: it has none (nor DNS)
    down: bool = False


class VirtualApiServer:
    """The TLS listener; :meth:`publish` adds or replaces a vCluster, :meth:`withdraw` removes it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._apis: dict[str, VirtualApi] = {}  # by every DNS name of its certificate
        self._contexts: dict[tuple[str, str], ssl.SSLContext] = {}
        self._lock = threading.Lock()
        self._folder = tempfile.TemporaryDirectory(prefix="vcluster-api-")
        self._default = self._context(_unknown_name_pki(), None, "unknown")
        self._default.sni_callback = self._select
        self._server = _Server((host, port), _Handler)
        self._server.socket = self._default.wrap_socket(
            self._server.socket, server_side=True, do_handshake_on_connect=False
        )
        self._server.apis = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="vcluster-api", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> VirtualApiServer:
        self._thread.start()
        log.info("vCluster API stand-in listening", extra={"port": self.port})
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._folder.cleanup()

    def publish(self, api: VirtualApi) -> None:
        context = self._context(api.serving, api.ca, f"{api.namespace}-{api.release}")
        with self._lock:
            self._drop(api.namespace, api.release)
            self._contexts[(api.namespace, api.release)] = context
            service = f"{api.release}.{api.namespace}"
            for name in {*api.names, service, f"{service}.svc", f"{service}.svc.cluster.local"}:
                self._apis[name.lower()] = api

    def set_down(self, namespace: str, release: str, down: bool) -> bool:
        """Make a published vCluster's API refuse every connection (or answer again); whether
        that changed anything."""
        with self._lock:
            found = [(n, a) for n, a in self._apis.items() if (a.namespace, a.release) == (namespace, release)]
            if not found or found[0][1].down == down:
                return False
            for name, api in found:
                self._apis[name] = dataclasses.replace(api, down=down)
            return True

    def withdraw(self, namespace: str, release: str) -> None:
        with self._lock:
            self._drop(namespace, release)

    def _drop(self, namespace: str, release: str) -> None:
        self._contexts.pop((namespace, release), None)
        for name in [n for n, a in self._apis.items() if (a.namespace, a.release) == (namespace, release)]:
            del self._apis[name]

    def lookup(self, name: str) -> VirtualApi | None:
        with self._lock:
            return self._apis.get(name.lower().rstrip("."))

    def _select(self, sock: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext) -> int | None:
        """SNI: the vCluster the client asked for presents its certificate and checks its CA."""
        api = self.lookup(server_name) if server_name else None
        if api is None:
            return None  # the throw-away certificate: the client's verification fails
        if api.down:
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        with self._lock:
            context = self._contexts.get((api.namespace, api.release))
        if context is None:
            return None
        sock.context = context
        setattr(sock, "vcluster", api)  # noqa: B010 - read back by the handler of this connection
        return None

    def _context(self, serving: pki.CertKey, ca: pki.CertificateAuthority | None, name: str) -> ssl.SSLContext:
        folder = Path(self._folder.name)
        cert = pki.write_private(folder / f"{name}.crt", serving.cert_pem)
        key = pki.write_private(folder / f"{name}.key", serving.key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        # OpenSSL keeps the first context's verify mode after SNI switches context: optional
        # everywhere, each vCluster's own CA in its own context (an unknown CA fails the handshake).
        context.verify_mode = ssl.CERT_OPTIONAL
        if ca is not None:
            context.load_verify_locations(cadata=ca.cert_pem.decode())
        return context


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    apis: VirtualApiServer

    def get_request(self) -> tuple[Any, Any]:
        sock, address = self.socket.accept()
        sock.settimeout(10)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A refused handshake is logged where it happens; anything else as socketserver does."""
        if not isinstance(sys.exc_info()[1], _Refused):
            super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else a response in two writes waits for a delayed ACK (40 ms)
    server: _Server

    def setup(self) -> None:
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError) as err:
            log.info("TLS handshake refused", extra={"peer": self.client_address[0], "error": str(err)})
            self.request.close()
            raise _Refused from err
        super().setup()

    def handle(self) -> None:
        try:
            super().handle()
        except (TimeoutError, ssl.SSLError, ConnectionError):
            self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        return

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        api: VirtualApi | None = getattr(self.request, "vcluster", None)
        path = self.path.split("?", 1)[0]
        if api is None:
            self._answer(404, {"kind": "Status", "status": "Failure", "message": "no such vCluster", "code": 404})
        elif path in ("/readyz", "/livez", "/healthz"):
            self._answer_text(200, "ok")
        elif not self.request.getpeercert():
            self._answer(401, _status(401, "Unauthorized", "Unauthorized"))
        elif path == KUBERNETES_PATH and api.kubernetes_ip is not None:
            self._answer(200, _service("kubernetes", "default", api.kubernetes_ip, [("https", 443, "TCP")]))
        elif path == DNS_PATH and api.kubernetes_ip is not None:
            self._answer(200, _service("kube-dns", "kube-system", None, [("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")]))
        elif path in (KUBERNETES_PATH, DNS_PATH):
            name = path.rsplit("/", 1)[-1]
            details = {"name": name, "kind": "services"}
            self._answer(404, _status(404, "NotFound", f'services "{name}" not found', details))
        else:
            self._answer(404, _status(404, "NotFound", "the server could not find the requested resource"))

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer_text(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Refused(Exception):
    """The handshake failed; the connection is closed and nothing is served."""


def _status(code: int, reason: str, message: str, details: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _service(name: str, namespace: str, ip: str | None, ports: list[tuple[str, int, str]]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "ClusterIP",
        "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports],
    }
    if ip is not None:
        spec["clusterIP"] = ip
    return {"kind": "Service", "apiVersion": "v1", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


_UNKNOWN: pki.CertKey | None = None


def _unknown_name_pki() -> pki.CertKey:
    """A certificate of a CA nobody trusts, for a name no booted vCluster has (made once)."""
    global _UNKNOWN
    if _UNKNOWN is None:
        _UNKNOWN = pki.new_ca("vcluster-standin-unknown").issue_serving(["unknown.invalid"], [])
    return _UNKNOWN
