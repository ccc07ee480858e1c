"""FAULT INJECTOR: a front for the real kube-apiserver that holds chosen requests until a test
lets them through.

A race between two functions (issue 26 item 4: install creating a Tenant's namespace while cleanup
lets the Tenant go) lasts milliseconds on its own; a test makes it last as long as it needs by
holding the one request at the gate. A function process started with :meth:`ApiGate.kubeconfig`
(TLS on loopback with a CA of the gate's own, the identity's own bearer token: client-go sends a
token only over TLS) talks to the API server through it: every request is forwarded unchanged
over TLS, except one that matches ``hold`` (method and path), which
waits until :meth:`ApiGate.open`. :attr:`ApiGate.held` is set when the first such request arrives,
so the test acts on the event, not after a sleep. Nothing else is changed, and the API server
answers as it always does: what it refuses is refused.

Watches are not forwarded (answered 501): the functions that run through the gate make none.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import re
import ssl
import threading
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import yaml

from testbed.controlplane import pki
from testbed.standins.service_proxy import HOP_BY_HOP, send_answer


class ApiGate:
    """Forwards to ``server`` (``https://127.0.0.1:<port>``, trusted with ``ca_file``); holds a
    request whose ``METHOD path`` matches ``hold`` (a regular expression) until opened."""

    def __init__(self, server: str, ca_file: Path, hold: str, workdir: Path) -> None:
        upstream = urlsplit(server)
        self._host, self._port = upstream.hostname or "127.0.0.1", upstream.port or 443
        self._tls = ssl.create_default_context(cafile=str(ca_file))
        self._hold = re.compile(hold)
        self.held = threading.Event()  # a request matching ``hold`` arrived and waits
        self._open = threading.Event()
        self.passed: list[str] = []  # "METHOD path -> status" of every request forwarded
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def _forward(self) -> None:
                gate._through(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward  # noqa: N815 - http.server's names

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._ca = pki.new_ca("kubeopera-testbed-api-gate")
        serving = self._ca.issue_serving([], ["127.0.0.1"])
        cert = pki.write_private(workdir / "api-gate.crt", serving.cert_pem)
        key = pki.write_private(workdir / "api-gate.key", serving.key_pem)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="api-gate", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def open(self) -> None:
        """Let every held request (and every later one) through."""
        self._open.set()

    def kubeconfig(self, of: Path, to: Path) -> Path:
        """A copy of kubeconfig ``of`` whose clusters point at the gate (and trust its CA); written
        to ``to``."""
        config = yaml.safe_load(of.read_text())
        authority = base64.b64encode(self._ca.cert_pem).decode()
        for cluster in config["clusters"]:
            cluster["cluster"] = {"server": self.url, "certificate-authority-data": authority}
        to.write_text(yaml.safe_dump(config))
        return to

    def _through(self, request: http.server.BaseHTTPRequestHandler) -> None:
        if "watch=true" in request.path or "watch=1" in request.path:
            send_answer(request, 501, [("Content-Type", "text/plain")], b"watches do not pass the gate")
            return
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else None
        if self._hold.fullmatch(f"{request.command} {request.path}"):
            self.held.set()
            self._open.wait()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
        upstream = http.client.HTTPSConnection(self._host, self._port, context=self._tls, timeout=60)
        try:
            upstream.request(request.command, request.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            self.passed.append(f"{request.command} {request.path} -> {response.status}")
            send_answer(request, response.status, response.getheaders(), data)
        finally:
            upstream.close()

    def __enter__(self) -> ApiGate:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._open.set()
        self._server.shutdown()
        self._server.server_close()
