"""STAND-IN for cluster DNS and kube-proxy: ``*.svc.cluster.local`` → the local port that serves it.

In a cluster, Knative's data plane reaches its peers by Service names on port 80:
``broker-ingress.knative-eventing.svc.cluster.local``, the channel's
``<channel>-kn-channel.<ns>.svc.cluster.local``, ``broker-filter...``, and each function's Knative
Service ``tenant-install.kubeopera-system.svc.cluster.local``. Here every one of those is a process
on 127.0.0.1 with a port of its own, and there is no DNS. This module is an HTTP forward proxy:
the Knative processes (and the functions) get ``HTTP_PROXY`` pointing at it, Go's and Python's HTTP
clients then send requests for those names here (loopback targets such as the API server are
never proxied: ``NO_PROXY=127.0.0.1,localhost``), and the proxy forwards each to the port its host
maps to, keeping the ``Host`` header (the in-memory channel's dispatcher routes by it).

Because every hop of an event crosses it (source → ingress → channel → filter → function, the
reply back to the ingress, the dead-letter delivery), the proxy is also where the test bed watches
the real broker work: each forwarded request is kept as a :class:`Hop` (what was asked, of whom,
and what came back), the way a packet capture on the cluster network would see it. Nothing is
changed on the way; plain HTTP, as the data plane uses in the cluster domain.

In a cluster this forwarding is the kernel's (kube-proxy's iptables or IPVS rules) and costs next
to nothing; here it is Python in the process that started the proxy (the test bed's, or a
benchmark's). So that a benchmark can tell it apart from its own work, the proxy counts the CPU
time its handler threads spend (:meth:`ServiceProxy.cpu_seconds`: forwarding, tunnels and the
hop records, less the listeners' time, which is the watcher's; the accepting thread is left out).

HTTPS to a Service (check-ready asking a vCluster's API at ``https://vc-<t>.vcluster-<t>.svc:443``)
comes as ``CONNECT host:443`` (the functions' ``HTTPS_PROXY``): the proxy opens a byte tunnel to
the port :attr:`ServiceProxy.tunnels` maps the host to, and the TLS inside is end to end between
the client and that server (SNI, certificates and all). A host no tunnel route names is answered
502, as a name cluster DNS does not know leaves the client without a connection.
"""

from __future__ import annotations

import http.client
import http.server
import logging
import selectors
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

CLUSTER_DOMAIN = ".svc.cluster.local"
# Headers of one hop only, never forwarded (RFC 9110 section 7.6.1; Content-Length is set anew).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-authenticate",
        "content-length",
    }
)
_KEPT_REQUEST = ("traceparent", "prefer", "kn-namespace")
_KEPT_RESPONSE = ("retry-after",)


@dataclass(frozen=True)
class Hop:
    """One request the proxy forwarded and its answer (``status`` 502: the target did not answer)."""

    started: float  # time.time()
    finished: float
    method: str
    host: str
    path: str
    status: int
    request: Mapping[str, str] = field(default_factory=dict)  # ce-* headers and trace context
    response: Mapping[str, str] = field(default_factory=dict)  # ce-* of a reply, Retry-After

    @property
    def service(self) -> str:
        """The Service's name: the first label of the host."""
        return self.host.split(".", 1)[0]

    @property
    def namespace(self) -> str:
        parts = self.host.split(".")
        return parts[1] if len(parts) > 2 else ""

    def ce(self, attribute: str) -> str | None:
        """A CloudEvent attribute of the request (binary mode), e.g. ``ce("type")``."""
        return self.request.get(f"ce-{attribute}")


class Routes:
    """Host → (address, port): exact names first, then the first matching suffix."""

    def __init__(self) -> None:
        self._exact: dict[str, tuple[str, int]] = {}
        self._suffixes: list[tuple[str, tuple[str, int]]] = []
        self._lock = threading.Lock()

    def add(self, host: str, port: int, address: str = "127.0.0.1") -> None:
        with self._lock:
            self._exact[host.lower().rstrip(".")] = (address, port)

    def add_suffix(self, suffix: str, port: int, address: str = "127.0.0.1") -> None:
        with self._lock:
            self._suffixes.append((suffix.lower(), (address, port)))

    def lookup(self, host: str) -> tuple[str, int] | None:
        host = host.lower().rstrip(".")
        with self._lock:
            if host in self._exact:
                return self._exact[host]
            return next((target for suffix, target in self._suffixes if host.endswith(suffix)), None)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: ServiceProxy


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else a response in two writes waits for a delayed ACK (40 ms)
    server: _Server
    watched: float = 0.0

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        return

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def handle_one_request(self) -> None:
        # thread time only: a kept-alive connection waiting for its next request costs nothing
        started = time.thread_time()
        self.watched = 0.0  # the listeners' share of this request, set by ServiceProxy._forward
        self.raw_requestline = b""  # stays empty when the client closed instead of asking again
        try:
            super().handle_one_request()
        finally:
            self.server.proxy._spent(time.thread_time() - started - self.watched, self.raw_requestline != b"")

    def _forward(self) -> None:
        self.server.proxy._forward(self)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _forward

    def do_CONNECT(self) -> None:  # noqa: N802 - http.server's naming
        self.server.proxy._tunnel(self)


class ServiceProxy:
    """The proxy, its routes and the hops it forwarded. Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(self) -> None:
        self.routes = Routes()
        self.tunnels = Routes()  # CONNECT host → (address, port): HTTPS to a Service
        self._hops: list[Hop] = []
        self._in_flight = 0
        self._changed = threading.Condition()
        self._server: _Server | None = None
        self._local = threading.local()
        self._listeners: list[Callable[[Hop], None]] = []
        self._cpu = 0.0  # handler threads' CPU seconds, listeners' excluded (cpu_seconds)
        self._handled = 0  # requests whose CPU is in _cpu
        self._cpu_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self, port: int = 0) -> str:
        """Listen on 127.0.0.1; returns the proxy URL for ``HTTP_PROXY``."""
        server = _Server(("127.0.0.1", port), _Handler)
        server.proxy = self
        self._server = server
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="service-proxy", daemon=True
        ).start()
        log.info("service proxy (cluster DNS + kube-proxy stand-in) on %s", self.url)
        return self.url

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the service proxy is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ServiceProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ what it saw
    def hops(self) -> list[Hop]:
        with self._changed:
            return list(self._hops)

    def in_flight(self) -> int:
        with self._changed:
            return self._in_flight

    def on_hop(self, listener: Callable[[Hop], None]) -> None:
        """Call ``listener`` (in the forwarding thread) with every hop once answered."""
        self._listeners.append(listener)

    def wait(self, predicate: Callable[[list[Hop]], bool], timeout: float) -> bool:
        """Wait until ``predicate(hops)`` holds; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._hops), timeout)

    def cpu_seconds(self) -> float:
        """CPU seconds the proxy's handler threads have spent on requests answered so far (a
        tunnel's once it closes), the listeners' calls left out: what the kernel does in a cluster."""
        with self._cpu_lock:
            return self._cpu

    def handled(self) -> int:
        """How many requests (a tunnel is one) :meth:`cpu_seconds` counts so far."""
        with self._cpu_lock:
            return self._handled

    def _spent(self, seconds: float, request: bool) -> None:
        with self._cpu_lock:
            self._cpu += seconds
            self._handled += request

    def quiet_since(self) -> float:
        """When the last hop finished (or 0.0); with :meth:`in_flight` it says the network is idle."""
        with self._changed:
            return max((hop.finished for hop in self._hops), default=0.0)

    # ------------------------------------------------------------------ forwarding
    def _connection(self, target: tuple[str, int]) -> http.client.HTTPConnection:
        pool: dict[tuple[str, int], http.client.HTTPConnection] | None = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
        if target not in pool:
            pool[target] = http.client.HTTPConnection(*target, timeout=900)
        return pool[target]

    def _forward(self, request: _Handler) -> None:
        started = time.time()
        url = urlsplit(request.path)
        host = url.hostname or request.headers.get("Host", "").split(":")[0]
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        body = request._body()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        kept = {k.lower(): v for k, v in headers if k.lower().startswith("ce-") or k.lower() in _KEPT_REQUEST}
        with self._changed:
            self._in_flight += 1
        status, data = 502, b""
        reply_headers: list[tuple[str, str]] = []
        try:
            target = self.routes.lookup(host)
            if target is None:
                data = f"service proxy: no Service answers for {host!r}\n".encode()
            else:
                status, reply_headers, data = self._exchange(target, request.command, path, headers, body)
            send_answer(request, status, reply_headers, data)
        finally:
            response = {
                k.lower(): v for k, v in reply_headers if k.lower().startswith("ce-") or k.lower() in _KEPT_RESPONSE
            }
            hop = Hop(
                started,
                time.time(),
                request.command,
                host.lower(),
                path,
                status,
                MappingProxyType(kept),
                MappingProxyType(response),
            )
            with self._changed:
                self._in_flight -= 1
                self._hops.append(hop)
                self._changed.notify_all()
            watching = time.thread_time()
            for listener in self._listeners:
                try:
                    listener(hop)
                except Exception:  # a watcher's bug must not break the network
                    log.exception("service proxy listener failed")
            request.watched = time.thread_time() - watching  # the watcher's time, not the proxy's

    def _tunnel(self, request: _Handler) -> None:
        """``CONNECT host:port``: a byte tunnel to where :attr:`tunnels` maps the host, kept as one hop."""
        started = time.time()
        host = request.path.rsplit(":", 1)[0].strip("[]")
        target = self.tunnels.lookup(host)
        status = 502
        try:
            upstream = socket.create_connection(target, timeout=10) if target is not None else None
            if upstream is not None:  # TLS records both ways as they come, no delayed ACK waits
                upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            upstream = None
        try:
            if upstream is None:
                request.send_error(502, f"service proxy: no Service answers for {host!r}")
                return
            status = 200
            request.send_response_only(200, "Connection established")
            request.end_headers()
            request.wfile.flush()
            _relay(request.connection, upstream)
            request.close_connection = True
        finally:
            if upstream is not None:
                upstream.close()
            hop = Hop(started, time.time(), "CONNECT", host.lower(), "", status)
            with self._changed:
                self._hops.append(hop)
                self._changed.notify_all()

    def _exchange(
        self, target: tuple[str, int], method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        error: Exception | None = None
        for _ in range(2):
            reused = target in getattr(self._local, "pool", {})
            connection = self._connection(target)
            try:
                connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                for key, value in headers:
                    connection.putheader(key, value)
                connection.putheader("Content-Length", str(len(body)))
                connection.endheaders(body)
                response = connection.getresponse()
                return response.status, response.getheaders(), response.read()
            except (OSError, http.client.HTTPException) as err:
                error = err
                connection.close()
                self._local.pool.pop(target, None)
                if not reused:  # only a kept-alive connection the peer closed is tried again, once:
                    break  # a fresh one that failed may have delivered (a POST must not go twice)
        return 502, [], f"service proxy: {target[0]}:{target[1]}: {error}\n".encode()


def _relay(client: socket.socket, upstream: socket.socket, idle_seconds: float = 60.0) -> None:
    """Copy bytes both ways until either side closes (or nothing moves for ``idle_seconds``).
    A selector (epoll), not ``select.select``: that refuses a descriptor numbered 1024 or more, which
    a proxy with many tunnels open has (resync probing a thousand vClusters, 8 at a time)."""
    with selectors.DefaultSelector() as selector:
        selector.register(client, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, client)
        while True:
            ready = selector.select(idle_seconds)
            if not ready:
                return
            for key, _ in ready:
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                key.data.sendall(data)


def send_answer(
    request: http.server.BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], data: bytes
) -> None:
    """Answer ``request`` with what the next hop answered, its hop-by-hop headers left out."""
    try:
        request.send_response_only(status)
        for key, value in headers:
            if key.lower() not in HOP_BY_HOP:
                request.send_header(key, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(data)
    except OSError:  # the client gave up (its request was cancelled)
        request.close_connection = True
